"""Models from timm, HuggingFace transformers and diffusers on PyTorch's ``ocl`` device
(dlprim.torch), unchanged: their own classes, built from configs (random weights, no
downloads).

    python benchmarks/torch_brought_models.py check [--models resnet50d gpt2 ...]
    python benchmarks/torch_brought_models.py speed --model gpt2-124m [--device cuda]

``check``: per model, one forward with a loss, backward and a torch.optim.AdamW step on
ocl (CPU fallback on, every operator that used it counted), against a float64 CPU run of
the same weights: the output's and the worst parameter gradient's error, each norm-wise
relative (a gradient's against the larger of its own norm and 1e-3 of the model's largest
gradient norm, as some are zero in theory), the float32 CPU's own errors beside, and the
CPU fallbacks. ``speed``: ms per training step (forward, loss, backward, AdamW) on a
device, and on ocl the number of ATen operators per step and the host's time per
operator (the step's wall time over its operators, at a size where the device's work is
small). One process per device: PyTorch's autograd engine does not take a Python device
and CUDA in one backward pass.
"""
import argparse
import copy
import logging
import time

import torch


# ----- the models: name -> (builder, inputs(batch, device, dtype), output of the result)
def _timm(name, **kw):
    def build():
        import timm
        return timm.create_model(name, pretrained=False, **kw)
    return build


def _image_inputs(size, classes=1000):
    def make(batch, device, dtype):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(batch, 3, size, size, generator=g).to(device, dtype)
        return {"x": x, "labels": (torch.arange(batch) % classes).to(device)}
    return make


def _seeded(seed=1):
    return torch.Generator().manual_seed(seed)


def _hf(cls, config_cls, **config):
    def build():
        import transformers
        return getattr(transformers, cls)(getattr(transformers, config_cls)(**config))
    return build


def _token_inputs(seq, vocab, labels_len=None, extra=None):
    def make(batch, device, dtype):
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(3, vocab, (batch, seq), generator=g)
        d = {"input_ids": ids, "labels": ids[:, :labels_len].contiguous() if labels_len else ids}
        d.update(extra(batch, g) if extra else {})
        return {k: (v.to(dtype) if v.is_floating_point() else v).to(device) for k, v in d.items()}
    return make


def _diffusers(cls, **config):
    def build():
        import diffusers
        return getattr(diffusers, cls)(**config)
    return build


SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             vocab_size=128)
DECODER = dict(SMALL, num_key_value_heads=2, max_position_embeddings=64)
IMAGE = dict(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
             num_attention_heads=4, intermediate_size=128)

MODELS = {
    # timm, at their own resolution
    "resnet50d": (_timm("resnet50d"), _image_inputs(224)),
    "convnext_nano": (_timm("convnext_nano"), _image_inputs(224)),
    "deit_small_patch16_224": (_timm("deit_small_patch16_224"), _image_inputs(224)),
    "swin_tiny_patch4_window7_224": (_timm("swin_tiny_patch4_window7_224"), _image_inputs(224)),
    "efficientnet_b2": (_timm("efficientnet_b2"), _image_inputs(256)),
    "regnety_016": (_timm("regnety_016"), _image_inputs(224)),
    "mobilevitv2_100": (_timm("mobilevitv2_100"), _image_inputs(256)),
    "levit_128": (_timm("levit_128"), _image_inputs(224)),
    # transformers, small configs
    "gpt2": (_hf("GPT2LMHeadModel", "GPT2Config", n_layer=2, n_embd=64, n_head=4,
                 vocab_size=128, n_positions=64), _token_inputs(16, 128)),
    "bert": (_hf("BertForMaskedLM", "BertConfig", max_position_embeddings=64, **SMALL),
             _token_inputs(16, 128)),
    "roberta": (_hf("RobertaForMaskedLM", "RobertaConfig", max_position_embeddings=70, **SMALL),
                _token_inputs(16, 128)),
    "llama": (_hf("LlamaForCausalLM", "LlamaConfig", **DECODER), _token_inputs(16, 128)),
    "mistral": (_hf("MistralForCausalLM", "MistralConfig", sliding_window=8, **DECODER),
                _token_inputs(16, 128)),
    "qwen2": (_hf("Qwen2ForCausalLM", "Qwen2Config", **DECODER), _token_inputs(16, 128)),
    "t5": (_hf("T5ForConditionalGeneration", "T5Config", d_model=64, d_ff=128, num_layers=2,
               num_heads=4, d_kv=16, vocab_size=128, decoder_start_token_id=0),
           _token_inputs(16, 128, labels_len=8)),
    "vit": (_hf("ViTForImageClassification", "ViTConfig", num_labels=10, **IMAGE),
            lambda b, dev, dt: {"pixel_values": torch.randn(
                b, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(dev, dt),
                "labels": (torch.arange(b) % 10).to(dev)}),
    "whisper": (_hf("WhisperForConditionalGeneration", "WhisperConfig", d_model=64,
                    encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                    vocab_size=128, num_mel_bins=16, max_source_positions=32,
                    max_target_positions=32, decoder_start_token_id=1, pad_token_id=0,
                    eos_token_id=2, bos_token_id=1),
                lambda b, dev, dt: {"input_features": torch.randn(
                    b, 16, 64, generator=torch.Generator().manual_seed(1)).to(dev, dt),
                    "labels": torch.randint(3, 128, (b, 8), generator=_seeded()).to(dev)}),
    "clip": (_hf("CLIPModel", "CLIPConfig", projection_dim=32,
                 text_config=dict(SMALL, max_position_embeddings=32),
                 vision_config=IMAGE),
             _token_inputs(16, 128, extra=lambda b, g: {
                 "pixel_values": torch.randn(b, 3, 32, 32, generator=g)})),
    "unet2d_condition": (_diffusers(
        "UNet2DConditionModel", sample_size=16, in_channels=4, out_channels=4,
        layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=8),
        lambda b, dev, dt: {"sample": torch.randn(b, 4, 16, 16, generator=_seeded()).to(dev, dt),
                            "timestep": torch.tensor([10, 500] * b)[:b].to(dev),
                            "encoder_hidden_states": torch.randn(
                                b, 7, 32, generator=_seeded(2)).to(dev, dt)}),
    "autoencoder_kl": (_diffusers(
        "AutoencoderKL", in_channels=3, out_channels=3, block_out_channels=(32, 64),
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
        latent_channels=4, norm_num_groups=8, sample_size=32),
        lambda b, dev, dt: {"sample": torch.randn(b, 3, 32, 32, generator=_seeded()).to(dev, dt),
                            "sample_posterior": False}),
    # more transformers architectures, small configs
    "distilbert": (_hf("DistilBertForMaskedLM", "DistilBertConfig", dim=64, n_layers=2,
                       n_heads=4, hidden_dim=128, vocab_size=128), _token_inputs(16, 128)),
    "albert": (_hf("AlbertForMaskedLM", "AlbertConfig", embedding_size=32, **SMALL),
               _token_inputs(16, 128)),
    "deberta_v2": (_hf("DebertaV2ForMaskedLM", "DebertaV2Config", **SMALL),
                   _token_inputs(16, 128)),
    "electra": (_hf("ElectraForMaskedLM", "ElectraConfig", embedding_size=64, **SMALL),
                _token_inputs(16, 128)),
    "bart": (_hf("BartForConditionalGeneration", "BartConfig", d_model=64, encoder_layers=2,
                 decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                 encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=128,
                 max_position_embeddings=64), _token_inputs(16, 128)),
    "opt": (_hf("OPTForCausalLM", "OPTConfig", hidden_size=64, num_hidden_layers=2,
                num_attention_heads=4, ffn_dim=128, vocab_size=128, word_embed_proj_dim=64,
                max_position_embeddings=64), _token_inputs(16, 128)),
    "gpt_neo": (_hf("GPTNeoForCausalLM", "GPTNeoConfig", hidden_size=64, num_layers=2,
                    num_heads=4, vocab_size=128, attention_types=[[["global", "local"], 1]],
                    max_position_embeddings=64, window_size=8), _token_inputs(16, 128)),
    "gptj": (_hf("GPTJForCausalLM", "GPTJConfig", n_embd=64, n_layer=2, n_head=4,
                 vocab_size=128, rotary_dim=8, n_positions=64), _token_inputs(16, 128)),
    "falcon": (_hf("FalconForCausalLM", "FalconConfig", hidden_size=64, num_hidden_layers=2,
                   num_attention_heads=4, vocab_size=128), _token_inputs(16, 128)),
    "phi": (_hf("PhiForCausalLM", "PhiConfig", max_position_embeddings=64, **SMALL),
            _token_inputs(16, 128)),
    "phi3": (_hf("Phi3ForCausalLM", "Phi3Config", max_position_embeddings=64, pad_token_id=0,
                 **SMALL), _token_inputs(16, 128)),
    "gemma": (_hf("GemmaForCausalLM", "GemmaConfig", head_dim=16, num_key_value_heads=2,
                  max_position_embeddings=64, **SMALL), _token_inputs(16, 128)),
    "gemma2": (_hf("Gemma2ForCausalLM", "Gemma2Config", head_dim=16, num_key_value_heads=2,
                   max_position_embeddings=64, sliding_window=8, **SMALL),
               _token_inputs(16, 128)),
    "mt5": (_hf("MT5ForConditionalGeneration", "MT5Config", d_model=64, d_ff=128, num_layers=2,
                num_heads=4, d_kv=16, vocab_size=128, decoder_start_token_id=0),
            _token_inputs(16, 128)),
    "hf_convnext": (_hf("ConvNextForImageClassification", "ConvNextConfig", num_stages=2,
                        hidden_sizes=[16, 32], depths=[1, 1], num_labels=10),
                    lambda b, dev, dt: {"pixel_values": torch.randn(
                        b, 3, 32, 32, generator=_seeded()).to(dev, dt),
                        "labels": (torch.arange(b) % 10).to(dev)}),
    "hf_swin": (_hf("SwinForImageClassification", "SwinConfig", image_size=32, patch_size=4,
                    embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
                    num_labels=10),
                lambda b, dev, dt: {"pixel_values": torch.randn(
                    b, 3, 32, 32, generator=_seeded()).to(dev, dt),
                    "labels": (torch.arange(b) % 10).to(dev)}),
    "segformer": (_hf("SegformerForSemanticSegmentation", "SegformerConfig",
                      num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                      hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                      decoder_hidden_size=32, num_labels=5),
                  lambda b, dev, dt: {"pixel_values": torch.randn(
                      b, 3, 32, 32, generator=_seeded()).to(dev, dt),
                      "labels": torch.randint(0, 5, (b, 32, 32), generator=_seeded(2)).to(dev)}),
    "wav2vec2": (_hf("Wav2Vec2ForCTC", "Wav2Vec2Config", conv_dim=(16, 16), conv_stride=(5, 2),
                     conv_kernel=(10, 3), num_feat_extract_layers=2, num_conv_pos_embeddings=16,
                     num_conv_pos_embedding_groups=4, **SMALL),
                 lambda b, dev, dt: {"input_values": torch.randn(
                     b, 1600, generator=_seeded()).to(dev, dt)}),
    "siglip": (_hf("SiglipModel", "SiglipConfig",
                   text_config=dict(SMALL, max_position_embeddings=16),
                   vision_config=dict(IMAGE)),
               _token_inputs(16, 128, extra=lambda b, g: {
                   "pixel_values": torch.randn(b, 3, 32, 32, generator=g)})),
    "mamba": (_hf("MambaForCausalLM", "MambaConfig", hidden_size=64, num_hidden_layers=2,
                  vocab_size=128, state_size=8), _token_inputs(16, 128)),
    # the speed rows
    "gpt2-124m": (_hf("GPT2LMHeadModel", "GPT2Config"), _token_inputs(256, 50257)),
    "llama-8x1024": (_hf("LlamaForCausalLM", "LlamaConfig", hidden_size=1024,
                         num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                         intermediate_size=2816, vocab_size=32000,
                         max_position_embeddings=512), _token_inputs(256, 32000)),
}


def forward(model, inputs):
    """(output tensor, loss) of one forward: a library's own loss where it has one."""
    if "x" in inputs:  # timm: logits, cross-entropy
        out = model(inputs["x"])
        return out, torch.nn.functional.cross_entropy(out.float(), inputs["labels"])
    result = model(**inputs, **({"return_loss": True} if "pixel_values" in inputs
                                and "input_ids" in inputs else {}))
    out = getattr(result, "logits", None)
    if out is None:
        out = getattr(result, "logits_per_image", None)
    if out is None:
        out = result.sample
    loss = getattr(result, "loss", None)
    return out, (loss if loss is not None else out.float().square().mean())


def _rel(got, want):
    got, want = got.detach().cpu().double(), want.detach().cpu().double()
    return float((got - want).norm() / max(float(want.norm()), 1e-300))


def _grad_error(model, exact):
    grads = [(p.grad, q.grad) for p, q in zip(model.parameters(), exact.parameters())
             if q.grad is not None]
    scale = max(float(q.norm()) for _, q in grads)
    worst = 0.0
    for p, q in grads:
        if p is None:
            return float("inf")
        d = (p.detach().cpu().double() - q).norm()
        worst = max(worst, float(d / max(float(q.norm()), 1e-3 * scale)))
    return worst


class _Fallbacks(logging.Handler):
    def __init__(self):
        super().__init__()
        self.ops = []

    def emit(self, record):
        text = record.getMessage()
        if "runs on the CPU" in text:
            self.ops.append(text.split(" runs on")[0].replace("dlprim.torch: ", ""))


def check(name, batch, device):
    build, inputs = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    exact = copy.deepcopy(model).double()
    single = copy.deepcopy(model)
    ex_out, ex_loss = forward(exact, inputs(batch, "cpu", torch.float64))
    ex_loss.backward()
    cpu_out, cpu_loss = forward(single, inputs(batch, "cpu", torch.float32))
    cpu_loss.backward()
    import dlprim.torch as dt
    seen = _Fallbacks()
    logging.getLogger("dlprim.torch").addHandler(seen)
    dt.dispatch._fallback["warned"].clear()  # every fallback of this model logged again
    dt.allow_cpu_fallback(True)
    params = len(list(model.parameters()))
    try:
        model.to(device)
        out, loss = forward(model, inputs(batch, device, torch.float32))
        loss.backward()
        torch.optim.AdamW(model.parameters(), lr=1e-4).step()
        dt.synchronize()
    finally:
        dt.allow_cpu_fallback(False)
        logging.getLogger("dlprim.torch").removeHandler(seen)
    return {"model": name, "forward": _rel(out, ex_out), "backward": _grad_error(model, exact),
            "cpu32_forward": _rel(cpu_out, ex_out), "cpu32_backward": _grad_error(single, exact),
            "params": (params, len(list(model.parameters()))), "fallbacks": sorted(set(seen.ops))}


def _sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elif device.startswith("ocl"):
        import dlprim.torch
        dlprim.torch.synchronize()


def speed(name, batch, device, steps, warmup=3):
    build, inputs = MODELS[name]
    torch.manual_seed(0)
    model = build().to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = inputs(batch, device, torch.float32)

    def step():
        opt.zero_grad(set_to_none=True)
        forward(model, data)[1].backward()
        opt.step()
    for _ in range(warmup):
        step()
    _sync(device)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(1e3 * (time.perf_counter() - start))
    return sorted(times)[len(times) // 2], step


def operators_per_step(step):
    import dlprim.torch
    from dlprim.torch.dispatch import counting_operators
    with counting_operators() as count:
        step()
        dlprim.torch.synchronize()
    return count[0]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["check", "speed"])
    p.add_argument("--models", nargs="*", default=[m for m in MODELS if "-" not in m])
    p.add_argument("--model", default="gpt2-124m")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", default="ocl")
    args = p.parse_args(argv)
    print("PyTorch %s" % torch.__version__)
    if args.device.startswith("ocl"):
        import dlprim.torch
        print("ocl device: %s" % dlprim.torch.context().name)
    if args.what == "check":
        print("| model | params CPU/ocl | forward | backward | CPU float32 forward | "
              "CPU float32 backward | CPU fallbacks |  (errors against a float64 CPU run)")
        print("|---|---|---|---|---|---|---|")
        for name in args.models:
            try:
                r = check(name, args.batch, args.device)
            except Exception as err:  # noqa: BLE001 - a table row per model
                print("| %s | error: %s: %s |" % (name, type(err).__name__, str(err)[:200]),
                      flush=True)
                continue
            print("| %s | %d/%d | %.1e | %.1e | %.1e | %.1e | %s |" % (
                name, r["params"][0], r["params"][1], r["forward"], r["backward"],
                r["cpu32_forward"], r["cpu32_backward"],
                ", ".join(r["fallbacks"]) or "0"), flush=True)
        return
    ms, step = speed(args.model, args.batch, args.device, args.steps)
    line = "%s batch %d training step (fwd, loss, bwd, AdamW) on %s: %.1f ms" % (
        args.model, args.batch, args.device, ms)
    if args.device.startswith("ocl"):
        ops = operators_per_step(step)
        line += "; %d ATen operators per step, %.0f us of wall time per operator" % (
            ops, 1e3 * ms / max(ops, 1))
    print(line, flush=True)


if __name__ == "__main__":
    main()
