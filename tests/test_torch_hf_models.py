"""The models people bring, on PyTorch's ``ocl`` device: transformers' GPT-2, BERT, RoBERTa,
Llama, Mistral, Qwen2, T5, ViT, Whisper and CLIP, and diffusers' UNet and VAE, built from
small configs with random weights (nothing is downloaded).

Each model runs forward with a loss, backward and one AdamW step on ocl with no operator
on the CPU; its outputs and every parameter's gradient are compared with a float64 CPU
copy, its AdamW step with the same step of a float32 CPU copy given the same gradients.
The decoders also generate: greedy (the CPU's tokens) and sampled (seeded, reproducible).
Models run in eval() mode (no dropout) except GPT-2's training run. ``make test`` runs
six of the models and two generators; ``DLPRIM_MODELS_FULL=1`` runs all of them."""
import contextlib
import copy
import logging
import os
from dataclasses import dataclass
from typing import Callable

import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")
from dlprim.torch import dispatch  # noqa: E402

DEV = "ocl"
VOCAB, SEQ, BATCH = 128, 16, 2
OUTPUT_TOL = 1e-4  # norm-wise, float32 on ocl against float64 on the CPU
GRAD_TOL = 1e-3
# some gradients are zero in theory (the attention key's bias: softmax ignores a constant
# added to every score) and rounding noise in float32: measured against this share of the
# model's largest gradient instead
GRAD_FLOOR = 1e-3
STEP_TOL = 1e-5


# ----- counting the operators that run on the CPU
class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.operators = []

    def emit(self, record):
        message = record.getMessage()
        if "runs on the CPU" in message:
            self.operators.append(message.split(" runs on the CPU")[0].split(": ")[-1])


@contextlib.contextmanager
def cpu_fallbacks():
    """The operators that ran on the CPU inside the block. The fallback is on there, so that
    one run names every missing operator rather than stopping at the first (an operator
    missing inside a backward pass runs on the CPU whatever the setting); each warns once
    per process, so what earlier tests warned about is forgotten for the block."""
    logger = logging.getLogger("dlprim.torch")
    collect, allowed = _Collect(), dt.cpu_fallback_allowed()
    warned = set(dispatch._fallback["warned"])
    dispatch._fallback["warned"].clear()
    level = logger.level
    if not logger.isEnabledFor(logging.WARNING):
        logger.setLevel(logging.WARNING)
    logger.addHandler(collect)
    dt.allow_cpu_fallback(True)
    try:
        yield collect.operators
    finally:
        dt.allow_cpu_fallback(allowed)
        logger.removeHandler(collect)
        logger.setLevel(level)
        dispatch._fallback["warned"].update(warned)


def assert_no_fallback(operators, what):
    assert not operators, "%s: these operators ran on the CPU (no ocl implementation): %s" % (
        what, ", ".join(sorted(set(operators))))


# ----- the models
def gen(seed):
    return torch.Generator().manual_seed(seed)


def token_ids(seed=1, length=SEQ):
    return torch.randint(3, VOCAB, (BATCH, length), generator=gen(seed))


def masked_labels(ids):
    """Labels for a masked LM: half the positions ignored (-100), as the collators do."""
    keep = torch.rand(ids.shape, generator=gen(9)) < 0.5
    return torch.where(keep, ids, torch.full_like(ids, -100))


def hf_outputs(field):
    return lambda model, inputs: _hf(model, inputs, field)


def _hf(model, inputs, field):
    out = model(**inputs)
    return getattr(out, field), out.loss


def squared_mean(model, inputs):
    """diffusers' models return no loss: the mean square of the output stands for one."""
    out = model(**inputs).sample
    return out, out.square().mean()


@dataclass
class Case:
    build: Callable    # () -> the model, on the CPU, in float32
    inputs: Callable   # () -> keyword arguments of forward (CPU tensors and options)
    outputs: Callable  # (model, inputs) -> (the tensor compared, the loss)


def _transformers():
    return pytest.importorskip("transformers")


def _diffusers():
    return pytest.importorskip("diffusers")


def _decoder(config, model, **extra):
    def build():
        t = _transformers()
        return getattr(t, model)(getattr(t, config)(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=64, **extra))
    return build


def _causal_inputs():
    ids = token_ids()
    return dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)


def _masked_inputs():
    ids = token_ids()
    return dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=masked_labels(ids))


def _gpt2():
    t = _transformers()
    return t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB,
                                          n_positions=64))


def _encoder(config, model, positions):
    def build():
        t = _transformers()
        return getattr(t, model)(getattr(t, config)(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            vocab_size=VOCAB, max_position_embeddings=positions))
    return build


def _t5():
    t = _transformers()
    return t.T5ForConditionalGeneration(t.T5Config(
        d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16, vocab_size=VOCAB,
        decoder_start_token_id=0))


def _t5_inputs():
    return dict(input_ids=token_ids(), labels=token_ids(seed=2, length=8))


def _vit():
    t = _transformers()
    return t.ViTForImageClassification(t.ViTConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, num_labels=10))


def _vit_inputs():
    return dict(pixel_values=torch.randn(BATCH, 3, 32, 32, generator=gen(3)),
                labels=torch.tensor([3, 7]))


def _whisper():
    t = _transformers()
    return t.WhisperForConditionalGeneration(t.WhisperConfig(
        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=VOCAB,
        num_mel_bins=16, max_source_positions=32, max_target_positions=32,
        decoder_start_token_id=1, pad_token_id=0, eos_token_id=2, bos_token_id=1))


def _whisper_inputs():
    # 64 frames: the encoder's stride-2 convolution leaves max_source_positions (32)
    return dict(input_features=torch.randn(BATCH, 16, 64, generator=gen(4)),
                labels=token_ids(seed=2, length=8))


def _clip():
    t = _transformers()
    sizes = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128)
    return t.CLIPModel(t.CLIPConfig(
        text_config=dict(vocab_size=VOCAB, max_position_embeddings=64, bos_token_id=1,
                         eos_token_id=2, pad_token_id=0, **sizes),
        vision_config=dict(image_size=32, patch_size=8, **sizes), projection_dim=32))


def _clip_inputs():
    ids = token_ids()
    ids[:, -1] = 2  # the text's eos token: its position is the text's pooled output
    return dict(input_ids=ids, pixel_values=torch.randn(BATCH, 3, 32, 32, generator=gen(5)),
                return_loss=True)


def _unet():
    return _diffusers().UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=8)


def _unet_inputs():
    return dict(sample=torch.randn(BATCH, 4, 16, 16, generator=gen(6)),
                timestep=torch.tensor([10, 500]),
                encoder_hidden_states=torch.randn(BATCH, 7, 32, generator=gen(7)))


def _vae():
    return _diffusers().AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 64),
        latent_channels=4, norm_num_groups=8, sample_size=32)


def _vae_inputs():
    return dict(sample=torch.randn(BATCH, 3, 32, 32, generator=gen(8)), sample_posterior=False)


LOGITS = hf_outputs("logits")
CASES = {
    "gpt2": Case(_gpt2, _causal_inputs, LOGITS),
    "bert": Case(_encoder("BertConfig", "BertForMaskedLM", 64), _masked_inputs, LOGITS),
    # RoBERTa's positions start after the padding index (1): 16 tokens need 18 of them
    "roberta": Case(_encoder("RobertaConfig", "RobertaForMaskedLM", 70), _masked_inputs, LOGITS),
    "llama": Case(_decoder("LlamaConfig", "LlamaForCausalLM"), _causal_inputs, LOGITS),
    "mistral": Case(_decoder("MistralConfig", "MistralForCausalLM", sliding_window=8),
                    _causal_inputs, LOGITS),
    "qwen2": Case(_decoder("Qwen2Config", "Qwen2ForCausalLM"), _causal_inputs, LOGITS),
    "t5": Case(_t5, _t5_inputs, LOGITS),
    "vit": Case(_vit, _vit_inputs, LOGITS),
    "whisper": Case(_whisper, _whisper_inputs, LOGITS),
    "clip": Case(_clip, _clip_inputs, hf_outputs("logits_per_image")),
    "unet": Case(_unet, _unet_inputs, squared_mean),
    "vae": Case(_vae, _vae_inputs, squared_mean),
}
GENERATORS = ("gpt2", "llama", "qwen2", "t5", "whisper")
# make test's share (one of each kind: a tied causal decoder, rotary attention with grouped
# keys, an encoder-decoder with relative positions, 1-D convolutions, a vision transformer,
# a diffusion UNet); DLPRIM_MODELS_FULL=1 runs every case
if not os.environ.get("DLPRIM_MODELS_FULL"):
    CASES = {k: v for k, v in CASES.items() if k in ("gpt2", "llama", "t5", "whisper", "vit",
                                                      "unet")}
    GENERATORS = ("gpt2", "t5")


def build(name):
    torch.manual_seed(0)
    return CASES[name].build().eval()


def moved(inputs, device=None, dtype=None):
    """The inputs on a device, or their floating-point tensors in another dtype."""
    def one(v):
        if not isinstance(v, torch.Tensor):
            return v
        return v.to(device) if device else v.to(dtype) if v.is_floating_point() else v
    return {k: one(v) for k, v in inputs.items()}


def relative(got, want):
    got = got.detach().cpu().double()
    return ((got - want.detach().double()).norm() / want.detach().double().norm()).item()


# ----- one training step of each model, on ocl and on the CPU
@dataclass
class Step:
    name: str
    fallbacks: list
    output: torch.Tensor       # on ocl, float32
    loss: torch.Tensor
    ref_output: torch.Tensor   # float64 CPU
    ref_loss: torch.Tensor
    grads: dict                # name -> gradient on ocl (as a CPU tensor) or None
    ref_grads: dict
    ocl_params: list           # the ocl model's parameters, names
    cpu_params: list           # the float32 CPU copy's
    stepped: dict              # name -> parameter after AdamW on ocl (CPU tensor)
    ref_stepped: dict          # after the same step on the float32 CPU copy, same gradients


def _grads(model):
    return {n: None if p.grad is None else p.grad.detach().cpu().clone()
            for n, p in model.named_parameters()}


def _ocl_step(model, inputs, outputs):
    with cpu_fallbacks() as fell:
        output, loss = outputs(model, moved(inputs, DEV))
        loss.backward()
        grads = _grads(model)
        torch.optim.AdamW(model.parameters(), lr=1e-3).step()
        stepped = {n: p.detach().cpu() for n, p in model.named_parameters()}
    return fell, output.detach().cpu(), loss.detach().cpu(), grads, stepped


def _cpu_adamw(model, grads):
    """The float32 CPU copy's AdamW step, with the ocl model's gradients: the optimizer
    alone compared."""
    for n, p in model.named_parameters():
        p.grad = grads[n]
    torch.optim.AdamW(model.parameters(), lr=1e-3).step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.fixture(scope="module", params=sorted(CASES))
def step(request):
    name, case = request.param, CASES[request.param]
    model, inputs = build(name), case.inputs()
    ref, cpu = copy.deepcopy(model).double(), copy.deepcopy(model)
    model.to(DEV)
    fell, output, loss, grads, stepped = _ocl_step(model, inputs, case.outputs)
    ref_output, ref_loss = case.outputs(ref, moved(inputs, dtype=torch.float64))
    ref_loss.backward()
    return Step(name, fell, output, loss, ref_output.detach(), ref_loss.detach(), grads,
                _grads(ref), [n for n, _ in model.named_parameters()],
                [n for n, _ in cpu.named_parameters()], stepped, _cpu_adamw(cpu, grads))


def test_no_operator_runs_on_the_cpu(step):
    assert_no_fallback(step.fallbacks, step.name + " forward, backward and AdamW step")


def test_outputs_and_loss_match_float64(step):
    assert step.output.shape == step.ref_output.shape
    assert relative(step.output, step.ref_output) < OUTPUT_TOL
    assert abs(step.loss.item() - step.ref_loss.item()) < OUTPUT_TOL * abs(step.ref_loss.item())


def test_every_gradient_matches_float64(step):
    norms = [g.norm().item() for g in step.ref_grads.values() if g is not None]
    floor = GRAD_FLOOR * max(norms)
    bad = []
    for n, want in step.ref_grads.items():
        got = step.grads[n]
        if want is None or got is None:
            assert got is None and want is None, "%s: gradient on one side only" % n
            continue
        error = (got.double() - want).norm().item() / max(want.norm().item(), floor)
        if not error < GRAD_TOL:
            bad.append("%s %s: %.2e" % (n, list(want.shape), error))
    assert not bad, "gradients off by more than %g: %s" % (GRAD_TOL, "; ".join(bad))
    assert any(g is not None for g in step.grads.values())


def test_shared_parameters_stay_shared(step):
    # a tied weight (GPT-2's lm_head and wte) broken in two would be listed twice
    assert step.ocl_params == step.cpu_params


def test_adamw_step_matches_the_cpu(step):
    for n, want in step.ref_stepped.items():
        torch.testing.assert_close(step.stepped[n], want, rtol=STEP_TOL, atol=STEP_TOL * 1e-1,
                                   msg=lambda m, n=n: "%s after AdamW: %s" % (n, m))


def test_gpt2_trains_in_train_mode():
    model = build("gpt2").train().to(DEV)
    before = {n: p.detach().cpu() for n, p in model.named_parameters()}
    fell, _, loss, grads, stepped = _ocl_step(model, _causal_inputs(), LOGITS)
    assert_no_fallback(fell, "gpt2 in train() mode")
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads.values())
    assert all(not torch.equal(stepped[n], before[n]) for n in before if grads[n].any())


# ----- generate()
@pytest.fixture(scope="module", params=GENERATORS)
def generator(request):
    """(name, float32 CPU model, ocl model, the prompt's inputs)"""
    name = request.param
    model = build(name)
    cpu = copy.deepcopy(model)
    prompt = {k: v for k, v in CASES[name].inputs().items() if k != "labels"}
    return name, cpu, model.to(DEV), prompt


def generate(model, prompt, **options):
    """The sequences (on the CPU) and the scores of each new token. Both devices are asked
    for the same result: Whisper leaves its start token out unless a dict is asked for."""
    out = model.generate(**prompt, max_new_tokens=8, pad_token_id=0, output_scores=True,
                         return_dict_in_generate=True, **options)
    return out.sequences.cpu(), out.scores


def test_greedy_generation_gives_the_cpu_tokens(generator):
    name, cpu, ocl, prompt = generator
    want, scores = generate(cpu, prompt, do_sample=False)
    with cpu_fallbacks() as fell:
        got, _ = generate(ocl, moved(prompt, DEV), do_sample=False)
    assert_no_fallback(fell, name + " greedy generate()")
    start = want.shape[1] - len(scores)
    near_tie = False
    for row in range(BATCH):
        for k, step_scores in enumerate(scores):
            at = start + k
            if at < got.shape[1] and got[row, at] == want[row, at]:
                continue
            top = step_scores[row].topk(2).values
            margin = (top[0] - top[1]).item()
            # float32 rounding may only swap tokens whose logits are this close
            assert margin < 1e-4, "%s row %d token %d: ocl %s, CPU %s (logit margin %.2e)" % (
                name, row, k, got[row, at:at + 1].tolist(), want[row, at].item(), margin)
            near_tie = True
            break
    if not near_tie:
        assert torch.equal(got, want)


SAMPLING = dict(do_sample=True, top_k=20, top_p=0.9, temperature=0.8)


def test_sampled_generation_runs_on_ocl(generator):
    name, cpu, ocl, prompt = generator
    prompt = moved(prompt, DEV)
    with cpu_fallbacks() as fell:
        ids, scores = generate(ocl, prompt, **SAMPLING)
    assert_no_fallback(fell, name + " sampled generate()")
    assert ids.dtype == torch.int64 and ids.shape[0] == BATCH
    assert 1 <= len(scores) <= 8  # (fewer where every row ended on its eos token)
    start = ids.shape[1] - len(scores)
    if not ocl.config.is_encoder_decoder:
        assert torch.equal(ids[:, :start], prompt["input_ids"].cpu())
    assert ids.min() >= 0 and ids.max() < VOCAB


def test_sampled_generation_is_reproducible_with_a_seed(generator):
    name, cpu, ocl, prompt = generator
    prompt = moved(prompt, DEV)

    def sampled(seed):
        torch.manual_seed(seed)
        return generate(ocl, prompt, **SAMPLING)[0]
    first = sampled(7)
    assert torch.equal(sampled(7), first)
    assert not torch.equal(sampled(8), first)  # the seed reaches the draws


# ----- the dtypes a model is run in: 16-bit weights, autocast with a gradient scaler
@pytest.mark.parametrize("mode", ["float16", "bfloat16", "autocast_float16",
                                  "autocast_bfloat16"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_sixteen_bit_runs(name, mode):
    """model.half() / .to(torch.bfloat16), or torch.autocast("ocl") with
    torch.amp.GradScaler("ocl"): a training step with no CPU fallback, logits within the
    format's rounding of the float64 CPU's (float16 keeps 11 significant bits, bfloat16 8;
    a few layers of rounding)."""
    case = CASES[name]
    model, inputs = build(name), case.inputs()
    ref = copy.deepcopy(model).double()
    want = case.outputs(ref, moved(inputs, dtype=torch.float64))[0]
    dtype = torch.bfloat16 if "bfloat16" in mode else torch.float16
    model.to(DEV)
    ocl_inputs = moved(inputs, DEV)
    # AdamW on 16-bit parameters divides by eps = 1e-8, zero in float16, and gives
    # infinities on every device; such models train with SGD (or autocast's float32
    # parameters)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3) if mode.startswith("autocast") \
        else torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    with cpu_fallbacks() as fell:
        if mode.startswith("autocast"):
            scaler = torch.amp.GradScaler(DEV)
            with torch.autocast(DEV, dtype=dtype):
                output, loss = case.outputs(model, ocl_inputs)
            assert output.dtype == dtype and loss.dtype == torch.float32
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            model.to(dtype)
            output, loss = case.outputs(model, moved(ocl_inputs, dtype=dtype))
            assert output.dtype == dtype
            loss.backward()
            opt.step()
    assert_no_fallback(fell, "%s %s step" % (name, mode))
    assert relative(output.float(), want) < (2e-3 if dtype == torch.float16 else 2e-2)
    assert all(torch.isfinite(p).all() for p in model.parameters())
