"""The tokenizer a GGUF file describes in its metadata, as a ``tokenizers.Tokenizer``.

A GGUF file has no tokenizer.json: llama.cpp stores the vocabulary (``tokenizer.ggml.tokens``),
the merges, each token's type (``tokenizer.ggml.token_type``: 1 normal, 3 control, 4
user-defined, ...), the special token ids and the ``add_bos_token`` / ``add_eos_token`` flags as
metadata. This builds the tokenizer transformers 5 builds from the same metadata
(``AutoTokenizer.from_pretrained(folder, gguf_file=...)``; its
integrations/gguf/gguf_tokenizer_mapping.py), so that both give the same ids on any text
(tests/product/test_gguf.py, tests/product/test_smollm2.py):

* ``tokenizer.ggml.model`` ``gpt2`` (byte-level BPE, the only kind read here): a BPE model with
  the file's vocabulary and merges (each merge "a b" split at its one space), no unknown token,
  no subword prefix or suffix; a token spelled outside GPT-2's byte alphabet (256 printable
  stand-ins for the bytes 0-255) is respelled as the stand-ins of its UTF-8 bytes;
* pre-tokenizer: the byte-level split (GPT-2's regex, no prefix space) unless
  ``tokenizer.ggml.pre`` names a split transformers knows, of which the Llama-3 and Qwen2
  patterns are read here (a regex split, "isolated", then byte-level without its own regex); a
  ``pre`` value with a split of its own that is not read here is refused in one line;
* control tokens (type 3) spelled in the byte alphabet are added as special tokens and
  user-defined ones (type 4) as plain added tokens, so both are matched whole in the text;
* post-processing: the BOS id before (``add_bos_token``) and the EOS id after
  (``add_eos_token``) every sequence, neither by default: the tokenizer's own convention is what
  ``tokenizer.encode(text)`` (and so ``posbias measure``) uses.

SentencePiece vocabularies (``tokenizer.ggml.model`` ``llama``: Llama 2, TinyLlama, Mistral
v0.1) are refused in one line.
"""

from __future__ import annotations

from posbias.errors import UserError

CONTROL, USER_DEFINED = 3, 4

# Pre-tokenizer splits (the patterns of the models' own tokenizer.json files).
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPLITS = {
    name: _LLAMA3
    for name in (
        "llama3",
        "llama-v3",
        "llama-bpe",
        "falcon3",
        "falcon-h1",
        "pixtral",
        "midm-2.0",
        "lfm2",
        "jina-v5-nano",
        "dbrx",
        "smaug-bpe",
    )
}
SPLITS.update({name: _QWEN2 for name in ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez")})
# ``pre`` values transformers 5.24 splits with patterns not read here (refused rather than mis-split)
UNREAD_SPLITS = ("tekken", "qwen35", "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2")


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> stand-in character table: the printable bytes ! .. ~, ¡ .. ¬ and ® .. ÿ stand
    for themselves; the other 68 bytes, in increasing order, for chr(256), chr(257), ..."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def build(meta: dict, where: str):
    """The ``tokenizers.Tokenizer`` of a GGUF file's tokenizer metadata ``meta`` (key -> value, the
    ``tokenizer.`` keys of the file; module docstring); ``where`` names the file in refusals."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        what = "SentencePiece (llama)" if kind == "llama" else repr(kind)
        raise UserError(f"{where}: tokenizer.ggml.model {what} is not supported (only gpt2: byte-level BPE)")
    tokens = meta.get("tokenizer.ggml.tokens")
    merges = meta.get("tokenizer.ggml.merges")
    if not isinstance(tokens, list) or not tokens or not isinstance(merges, list):
        raise UserError(f"{where}: a gpt2 tokenizer needs tokenizer.ggml.tokens and tokenizer.ggml.merges")
    pre = meta.get("tokenizer.ggml.pre")
    if pre in UNREAD_SPLITS:
        raise UserError(
            f"{where}: tokenizer.ggml.pre {pre!r} is not supported (supported: the default "
            f"byte-level split, {', '.join(sorted(SPLITS))})"
        )
    spelling = byte_alphabet()
    alphabet = set(spelling.values())
    vocab = {}
    for index, token in enumerate(tokens):
        spelled = token if set(token) <= alphabet else "".join(spelling[b] for b in token.encode("utf-8"))
        vocab.setdefault(spelled, index)
    pairs = []
    for merge in merges:
        parts = merge.split(" ")
        if len(parts) != 2:
            raise UserError(f"{where}: tokenizer.ggml.merges entry {merge!r} is not two tokens")
        pairs.append((parts[0], parts[1]))
    tok = Tokenizer(
        models.BPE(
            vocab=vocab, merges=pairs, dropout=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False
        )
    )
    if pre in SPLITS:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(SPLITS[pre]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type") or []
    control = [
        AddedToken(t, normalized=False, special=True)
        for t, k in zip(tokens, types)
        if k == CONTROL and set(t) <= alphabet
    ]
    if control:
        tok.add_special_tokens(control)
    user = [
        AddedToken(t, normalized=False, special=False)
        for t, k in zip(tokens, types)
        if k == USER_DEFINED and t in vocab
    ]
    if user:
        tok.add_tokens(user)
    tok.post_processor = _post_processor(meta, tokens, where, processors)
    return tok


def _post_processor(meta: dict, tokens: list, where: str, processors):
    """BOS before / EOS after each sequence where the file's add_bos_token / add_eos_token say so."""
    ends = []
    for flag, key in (
        ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id"),
        ("tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id"),
    ):
        if meta.get(flag, False):
            index = meta.get(key)
            if not isinstance(index, int) or not 0 <= index < len(tokens):
                raise UserError(f"{where}: {flag} is true but {key} = {index!r} is not a token id")
            ends.append((tokens[index], index))
        else:
            ends.append(None)
    bos, eos = ends
    head = [f"{bos[0]}:0"] if bos else []
    tail = [f"{eos[0]}:0"] if eos else []
    pair_head = [f"{bos[0]}:1"] if bos else []
    pair_tail = [f"{eos[0]}:1"] if eos else []
    special = [e for e in (bos, eos) if e]
    return processors.TemplateProcessing(
        single=[*head, "$A:0", *tail],
        pair=[*head, "$A:0", *tail, *pair_head, "$B:1", *pair_tail],
        special_tokens=list(dict.fromkeys(special)),
    )
