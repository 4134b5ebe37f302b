"""Text from a trained causal language model, one character at a time.

The net is a deploy (predict-mode) net with one input of token ids, shape (1, context),
and a probability output of shape (context, vocab) (what dlprim-train writes as
``model-deploy.json`` for ``dlprim.models.gpt``). The window is filled from the left
with the most recent ids; positions after them hold id 0, which a causal model's
earlier positions never see, so the distribution at the last real position is exact.
"""
import numpy as np

from .errors import NonFiniteError

__all__ = ["sample_text", "next_token_distribution"]


def next_token_distribution(probs, temperature=1.0, top_k=None):
    """``probs`` (vocab,) sharpened or flattened by ``temperature`` and cut to the
    ``top_k`` most likely ids (None: all), renormalised."""
    if not temperature > 0:
        raise ValueError("temperature must be > 0, got %r" % (temperature,))
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError("top_k must be a positive integer or None, got %r" % (top_k,))
    p = np.asarray(probs, dtype=np.float64)
    if not np.all(np.isfinite(p)):
        raise NonFiniteError("the model's next-character probabilities are not finite")
    with np.errstate(divide="ignore"):
        logp = np.log(p) / temperature
    if top_k is not None and top_k < p.size:
        logp[np.argsort(logp)[:-top_k]] = -np.inf
    logp -= logp.max()
    p = np.exp(logp)
    return p / p.sum()


def sample_text(net, vocab, prompt="\n", length=200, temperature=1.0, top_k=None, seed=None,
                progress=False):
    """``length`` characters that ``net`` writes after ``prompt`` (not included).

    ``vocab`` is the CharVocab the model was trained with; ``seed`` makes the draw
    repeatable. A prompt character outside the vocabulary is a DataError naming it.
    """
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError("length must be an integer >= 0, got %r" % (length,))
    if len(net.input_names) != 1 or len(net.output_names) != 1:
        raise ValueError("sample_text needs a net with one input (token ids) and one output "
                         "(probabilities); this one has inputs %s and outputs %s"
                         % (net.input_names, net.output_names))
    tokens, out = net.tensor(net.input_names[0]), net.tensor(net.output_names[0])
    if len(tokens.shape) != 2 or tokens.shape[0] != 1:
        raise ValueError("sample_text: the input %r must be (1, context), it is %s"
                         % (net.input_names[0], tokens.shape))
    context = tokens.shape[1]
    ids = list(vocab.encode(prompt, "prompt"))
    if not ids:
        raise ValueError("prompt must have at least one character")
    rng = np.random.default_rng(seed)
    window = np.zeros((1, context), dtype=tokens.dtype)
    steps = range(length)
    if progress:
        from tqdm.auto import tqdm
        steps = tqdm(steps, desc="sampling", unit="char")
    first = len(ids)
    for _ in steps:
        recent = ids[-context:]
        window[0, :len(recent)] = recent
        tokens.to_device(window)
        net.forward()
        probs = out.to_host().reshape(context, -1)[len(recent) - 1]
        p = next_token_distribution(probs, temperature, top_k)
        ids.append(int(rng.choice(p.size, p=p)))
    return vocab.decode(ids[first:])
