"""octet's tokenizer.json (byte-level BPE) tokenizer against Hugging Face's
`tokenizers` package, the implementation such files are written for.

Three small tokenizers are trained here with `tokenizers` itself, each set up
as a family of real models defines it: llama3 (a Split regex, then ByteLevel
without its own regex; ignore_merges; a BOS template), gpt2 (ByteLevel with
its built-in regex) and qwen2 (NFC, then a Split regex with single digits).
Training them, rather than shipping downloaded files, keeps the test
self-contained and the files exactly what the library writes. Each vocabulary
also gets whole words that its merges never build, as a vocabulary converted
from tiktoken (Llama 3's) has: with ignore_merges they are used, without it
never. Special tokens sit inside the BPE vocabulary (gpt2) or after it (llama3,
qwen2), as in the real files. The tokenizer.json that `octet make-model
--tokenizer json` writes is held to the library the same way.

A test corpus aimed at where a reimplementation goes wrong (the regexes'
classes and look-ahead over Unicode whitespace, contractions in any case,
digit runs, combining marks, NFC, emoji, special tokens inside text, very
long words, random Unicode) is encoded by both, with and without the
template's special tokens, and HF's ids are decoded by both; so is a ~4 MB
corpus, whose speed, one thread each, is printed and never judged. Any
difference in ids or text fails the test.

  python hf_tokenizers_oracle.py --octet PATH_TO_octet --work DIR [--no-octet]

--no-octet builds the tokenizers, corpora and HF's results and says what it
would compare. tests/model/hf_tokenizers_oracle.sh makes the virtualenv and
runs this.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
import unicodedata

# One thread for HF, as for octet; rayon reads this when its pool starts.
os.environ["RAYON_NUM_THREADS"] = "1"

from tokenizers import Regex, Tokenizer, decoders, models, normalizers  # noqa: E402
from tokenizers import pre_tokenizers, processors, trainers  # noqa: E402

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
                  r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
                 r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
                   "<|start_header_id|>", "<|end_header_id|>"]
GPT2_SPECIALS = ["<|endoftext|>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 2000
SPEED_BYTES = 4_000_000
SHOWN_MISMATCHES = 5

WORDS = """the of and to in is was for that with as on by at from his her it
they we you this be are have had not but which or an were their one all there
been has when who will more no if out so said what up its about into than them
can only other new some could time these two may then do first any my now such
like our over man me even most made after also did many before must through
back years where much your way well down should because each just those people
how too little state good very make world still own see men work long get here
between both life being under never day same another know while last might us
great old year off come since against go came right used take three house use
during without again place around however home small found thought went say part
once general high upon school every interest number water light system program
function return value error server request token model memory thread kernel
Hello World Python Rust Monday January London Science Tokenizer""".split()
CONTRACTIONS = ["it's", "don't", "they're", "we've", "I'm", "you'll", "he'd",
                "can't", "IT'S", "WE'LL", "She'S", "they'VE", "o'clock"]
PHRASES = ["你好，世界。", "我们今天学习中文。", "日本語のテキストです。", "カタカナとひらがな",
           "한국어 텍스트입니다", "안녕하세요", "café", "naïve", "résumé", "Ünïcödé",
           "Straße", "Ελληνικά", "Русский язык", "مرحبا بالعالم", "שלום עולם",
           "नमस्ते दुनिया", "Tiếng Việt", "😀", "👍🏽", "🎉🎉", "❤️", "👨‍👩‍👧‍👦"]
# Pre-tokens of the test corpus, not in the training text, that
# add_whole_words puts in the vocabularies.
WHOLE_WORDS = [" quick", " brown", " fox", " jumps", " lazy", " dog", " ellipsis", " dashes",
               " comment", " naïve", " résumé", " Ελληνικά", " текст"]


def english_sentence(rng):
    words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
    if rng.random() < 0.4:
        words[rng.randrange(len(words))] = rng.choice(CONTRACTIONS)
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words)), rng.choice(PHRASES))
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words)), str(rng.randint(0, 10**rng.randint(1, 9))))
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice([".", ".", "?", "!", ",", ":"])


def code_snippet(rng):
    name, arg = rng.choice(WORDS), rng.choice(WORDS)
    n = rng.randint(0, 99999)
    if rng.random() < 0.5:
        return (f"def {name}_{arg}({arg}, n={n}):\n    if {arg} is None:\n"
                f"        return []\n    return [x * {n % 97} for x in {arg}]\n")
    return (f"int {name}(const std::vector<int>& {arg}) {{\n"
            f"\tfor (size_t i = 0; i < {arg}.size(); ++i) {{\n"
            f"\t\tif ({arg}[i] != {n}) return {arg}[i] << 2;\n\t}}\n"
            f"\treturn -1;  // {rng.choice(WORDS)}\n}}\n")


def numbers_line(rng):
    return (f"{rng.randint(1900, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.uniform(0, 1000):.{rng.randint(1, 6)}f} {rng.randint(0, 10**15)} "
            f"{rng.randint(0, 999)},{rng.randint(0, 999):03d}")


def generated_text(seed, n_bytes):
    """English-like sentences, code, numbers and some non-Latin text, as
    lines, about n_bytes of UTF-8 in all."""
    rng = random.Random(seed)
    lines, size = [], 0
    while size < n_bytes:
        pick = rng.random()
        if pick < 0.6:
            line = " ".join(english_sentence(rng) for _ in range(rng.randint(1, 6)))
        elif pick < 0.85:
            line = code_snippet(rng)
        else:
            line = numbers_line(rng)
        lines.append(line)
        size += len(line.encode())
    return lines


def english_strings():
    return ["Hello, world!", "It's a test.", "IT'S LOUD", "She'S here", "they'LL go",
            "we've done it", "We'VE", "I'm fine", "I'M FINE", "you'd", "YOU'D",
            "don't can't won't", "rock 'n' roll", "'s at the start", "'''quoted'''",
            "it\u2019s (a curly quote)", "it'\u017f (long s)", "the cat's hat's brim",
            "O'Neil's pub", "'sup 'Sup '\u017fup", "y'all 'llama I'dunno 'DD",
            "The quick brown fox jumps over the lazy dog.", "the lazy dog's quick jumps",
            "A sentence... with an ellipsis -- and dashes \u2014 and \u201cquotes\u201d.",
            "mailto:someone@example.com https://example.org/path?q=1&r=2#frag"]


def code_strings():
    return ["def f(x):\n    return x ** 2\n",
            "class A:\n    def __init__(self):\n        self.x = {'a': [1, 2, 3]}\n",
            "if (a && b || !c) { x += 1; y -= 2; z <<= 3; }",
            "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2};\n\treturn 0;\n}\n",
            "\t\tif (x) {\n\t\t\treturn 0;\n\t\t}\n",
            "for (auto& [k, v] : map) std::cout << k << \"=\" << v << '\\n';",
            "x->y->z; a::b::c; i++; --j; a != b; a == b; a <= b; a >= b; a => b",
            "/* block comment */ // line comment\n# python comment\n-- sql comment",
            "SELECT * FROM t WHERE id = 42;", "lambda: None", "print(f\"{x!r:>10}\")",
            "   \n    \n        x = 1\n", "{{{{}}}}[[[[]]]]((((", "$$$ %%% ^^^ &&& ***",
            "    " * 8 + "deeply_indented()", "a = b\t# tab before comment"]


def number_strings():
    return ["1234567890123", "3.14159", "2024-01-15", "1,000,000", "0x1F", "1e-10",
            "-42", "12:34:56", "$19.99", "100%", "v1.2.3", "a1b22c333d4444",
            "9" * 100, "1 22 333 4444 55555 666666", "\u00bd \u00b2 \u00b3",
            "\u2460\u2461\u2462", "\u0661\u0662\u0663", "\uff11\uff12\uff13",
            "\u216b \u2167", "\u0967\u0968\u0969", "3.0e+08 m/s", "0.000001"]


def whitespace_strings():
    return ["a  b", " ", "  ", "   ", "    ", " " * 17, "\t", "\t\t", "\n", "\n\n\n",
            "\r\n", "a\r\nb\r\n", "\r", "trailing   ", "   leading", "line \nnext",
            "a \n\n b", "x\n \n y", "  \n", "a   \n", " \t \n", "\u00a0", "a\u00a0b",
            "a \u00a0 b", "\u3000", "\u3000\u3000x", "a\u2003b", "\u2003\u2003 x",
            "\u0085", "a\u0085b", "\u2028", "a\u2029b", "\x0b\x0c", "x\x0by",
            "end with newline\n", "end with spaces  ", "\n\n\nx", "x\n\n\n", " \n \n ",
            "word\u200bword", "\ufeffBOM", "a\tb\tc", "  \t  \t", "a" + " " * 100 + "b",
            "\x1c\x1cb", "\x1f\x1f x", "\u180e\u180eb", "\x85\x85b", "\u00a0\u00a0b",
            "\u2028\u2028b", "\u200b\u200bb", "\x0b\x0bb"]


def cjk_strings():
    return ["你好，世界。", "我们今天学习中文，明天去北京。", "日本語のテキストです。",
            "カタカナとひらがなと漢字", "ｶﾀｶﾅ", "한국어 텍스트입니다.", "안녕하세요 세계",
            "「引用」と『二重引用』", "中文English混合", "ＡＢＣ　全角", "〇一二三四五六七八九十"]


def emoji_strings():
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"
    return ["\U0001f600", "\U0001f44d", "\U0001f44d\U0001f3fd", family,
            "\U0001f1ef\U0001f1f5\U0001f1fa\U0001f1f8", "\u2764\ufe0f",
            "\U0001f3f3\ufe0f\u200d\U0001f308", "text with \U0001f600 emoji",
            "\U0001f600\U0001f600\U0001f600", "1\ufe0f\u20e3", "\u263a\u2603\u2600",
            "\U0001f9d1\U0001f3ff\u200d\U0001f4bb coder", family + family]


def combining_strings():
    """Marks (not \\p{L}), and text that NFC changes (Qwen2 normalizes)."""
    viet = "Tiếng Việt có dấu: Người ta thường nói"
    return ["e\u0301", "\u00e9", "cafe\u0301 vs caf\u00e9", viet,
            unicodedata.normalize("NFD", viet), unicodedata.normalize("NFD", "한국어"),
            "नमस्ते दुनिया", "क्षत्रिय", "\u212b ngstr\u00f6m \u212a", "\uf900\uf901",
            "q\u0307\u0323 q\u0323\u0307", "\ufb01ne \ufb02ow", "\u1e9b\u0323",
            "a\u0300\u0301\u0302\u0303", "\u0301 leading mark", "\u01c5 \u01c4 \u01c6",
            "Z\u0351\u0352\u0353a\u0354\u0355l\u0356g\u0357o", "i\u0307",
            "e\u0301<|im_end|>\u0301"]


def rtl_strings():
    return ["مرحبا بالعالم", "שלום עולם", "العربية 123 English", "\u200fRTL mark",
            "זה טקסט בעברית, עם פסיק.", "فارسی\u200cزبان", "ا ل ع ر ب ي ة"]


def mixed_strings():
    return ["English中文日本語한국어", "Hello, 世界! 123", "naïve café résumé",
            "Ελληνικά και English", "Русский текст and more", "Ünïcödé ÀÉÎÕÜ àéîõü",
            "Straße STRASSE", "ǅungla", "ΣΊΣΥΦΟΣ", "İstanbul ıi", "x²+y²=z²", "αβγ123δεζ"]


def special_token_strings():
    return ["hi<|eot_id|>there", "<|endoftext|>", "<|endoftext|>hello", "hello<|endoftext|>",
            "<|endoftext|><|endoftext|>", "a<|endoftext|><|endoftext|>b", " <|eot_id|> ",
            "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe kind.<|eot_id|>",
            "<|eot_id|", "<|unknown|>", "<<|endoftext|>>", "<|endoftext|>\n\n<|im_end|>",
            "text <|end_of_text|>", "<|im_start|><|im_end|>"]


def edge_strings():
    rng = random.Random(20000)
    return ["", "a", " ", "\n", "'", "é", "中", "😀", "\x00", "\x7f", "\t", "~",
            "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(20000)),
            "".join(rng.choice("0123456789") for _ in range(5000)), " " * 1000,
            "ab" * 2000, "中" * 3000, "😀" * 500]


def random_strings():
    """Random printable Unicode, and random strings over a few characters that
    the regexes treat differently (whitespace kinds, letters, digits, marks)."""
    rng = random.Random(7)
    ranges = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x52f), (0x2000, 0x206f),
              (0x3000, 0x30ff), (0x4e00, 0x9fff), (0xac00, 0xd7a3),
              (0x20, 0xffff), (0x1f300, 0x1faff), (0x10000, 0x2ffff)]

    def printable_char():
        while True:
            c = chr(rng.randint(*rng.choice(ranges)))
            if c.isprintable():
                return c

    tricky = [" ", "  ", "\n", "\r", "\t", "\u00a0", "\u3000", "a", "Z", "é", "e\u0301",
              "中", "'", "s", "'ll", "1", "12345", ".", "!?", "😀", "<|endoftext|>"]
    printable = ["".join(printable_char() for _ in range(rng.randint(1, 40)))
                 for _ in range(80)]
    combos = ["".join(rng.choice(tricky) for _ in range(rng.randint(1, 25)))
              for _ in range(80)]
    return printable + combos


def test_corpus():
    return (english_strings() + code_strings() + number_strings() + whitespace_strings() +
            cjk_strings() + emoji_strings() + combining_strings() + rtl_strings() +
            mixed_strings() + special_token_strings() + edge_strings() + random_strings() +
            generated_text(seed=3, n_bytes=20_000))


def speed_corpus(test):
    """The test corpus, then fresh generated text in ten-line documents, to
    about SPEED_BYTES of UTF-8."""
    lines = generated_text(seed=4, n_bytes=SPEED_BYTES - utf8_size(test))
    return test + ["\n".join(lines[i:i + 10]) for i in range(0, len(lines), 10)]


def train_bpe(text, pre_tokenizer, normalizer=None, vocab_specials=()):
    """A byte-level BPE trained on text; every byte is in its vocabulary, and
    so are vocab_specials (ids 0 on), as GPT-2 has <|endoftext|>."""
    tok = Tokenizer(models.BPE())
    if normalizer:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=list(vocab_specials)))
    return tok


def add_whole_words(tok, ignore_merges):
    """Adds to tok's vocabulary words that its merges never build, as a
    vocabulary converted from tiktoken ranks (Llama 3's) has; with
    ignore_merges a pre-token in the vocabulary is one token, without it they
    are never used."""
    model = json.loads(tok.to_str())["model"]
    vocab = model["vocab"]
    for word in WHOLE_WORDS:
        pieces = tok.encode(word, add_special_tokens=False).tokens
        if len(pieces) > 1:
            vocab.setdefault("".join(pieces), len(vocab))
    tok.model = models.BPE(vocab=vocab, merges=[tuple(m) for m in model["merges"]],
                           ignore_merges=ignore_merges)


def split_then_bytes(pattern):
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def train_llama3(text):
    tok = train_bpe(text, split_then_bytes(LLAMA3_PATTERN))
    add_whole_words(tok, ignore_merges=True)
    tok.add_special_tokens(LLAMA3_SPECIALS)  # after the vocabulary, as in Llama 3
    tok.decoder = decoders.ByteLevel()
    bos = "<|begin_of_text|>"
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
        special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def train_gpt2(text):
    tok = train_bpe(text, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                    vocab_specials=GPT2_SPECIALS)
    add_whole_words(tok, ignore_merges=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def train_qwen2(text):
    tok = train_bpe(text, split_then_bytes(QWEN2_PATTERN), normalizer=normalizers.NFC())
    add_whole_words(tok, ignore_merges=False)
    tok.add_special_tokens(QWEN2_SPECIALS)  # after the vocabulary, as in Qwen2
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    return tok


TRAINERS = {"llama3": train_llama3, "gpt2": train_gpt2, "qwen2": train_qwen2}


def write_jsonl(path, items):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for item in items:
            f.write(json.dumps(item, ensure_ascii=False) + "\n")


def utf8_size(texts):
    return sum(len(s.encode()) for s in texts)


def hf_ids(tok, texts, add_special):
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=add_special)]


def hf_results(tok, texts, speed_texts):
    """HF's ids of texts with and without the template's special tokens
    (keyed True, False), its decode of the first, and its ids of
    speed_texts."""
    ids = {add: hf_ids(tok, texts, add) for add in (True, False)}
    return (ids, tok.decode_batch(ids[True], skip_special_tokens=True),
            hf_ids(tok, speed_texts, True))


def hf_speed(path, texts):
    """HF's MB/s for encode_batch over texts (one thread: RAYON_NUM_THREADS),
    loading the tokenizer.json at path afresh as octet does (an empty cache)."""
    tok = Tokenizer.from_file(path)
    start = time.perf_counter()
    tok.encode_batch(texts, add_special_tokens=True)
    return utf8_size(texts) / 1e6 / (time.perf_counter() - start)


def run_octet(octet, args, n_lines):
    """octet tokenize's stdout as n_lines parsed JSON values, and its stderr."""
    cmd = [octet, "tokenize"] + args
    done = subprocess.run(cmd, capture_output=True)
    stderr = done.stderr.decode("utf-8", "replace")
    if done.returncode != 0:
        sys.exit(f"hf_tokenizers_oracle: `{' '.join(cmd)}` exited {done.returncode}:\n{stderr}")
    lines = done.stdout.decode("utf-8").split("\n")  # not splitlines: U+2028 is text
    if lines[-1] == "":
        lines.pop()
    if len(lines) != n_lines:
        sys.exit(f"hf_tokenizers_oracle: `{' '.join(cmd)}` printed {len(lines)} lines "
                 f"for {n_lines} inputs:\n{stderr}")
    return [json.loads(line) for line in lines], stderr


def octet_speed(stderr):
    """The X MB/s of octet's `tokenize: N bytes in T ms = X MB/s` line."""
    match = re.search(r"tokenize: \d+ bytes in [\d.]+ ms = ([\d.]+ MB/s)", stderr)
    return match.group(1) if match else "unknown (no 'tokenize: ... MB/s' line on its stderr)"


def clip(seq, at, width):
    """repr of seq from a little before index at, at most width items."""
    lo = max(0, at - width // 4)
    return (("..." if lo else "") + repr(seq[lo:lo + width]) +
            ("..." if lo + width < len(seq) else ""))


def count_equal(name, what, texts, hf, octet):
    """How many of hf and octet's items are equal; prints the first few that
    are not."""
    unequal = [i for i in range(len(texts)) if hf[i] != octet[i]]
    for i in unequal[:SHOWN_MISMATCHES]:
        at = next((k for k, (a, b) in enumerate(zip(hf[i], octet[i])) if a != b),
                  min(len(hf[i]), len(octet[i])))
        print(f"hf_tokenizers_oracle: {name}: {what} differ from index {at} on "
              f"{clip(texts[i], 0, 80)} ({len(texts[i])} chars):\n"
              f"  tokenizers {clip(hf[i], at, 16)}\n  octet      {clip(octet[i], at, 16)}")
    return len(texts) - len(unequal)


def check_with_octet(octet, name, work, texts, speed_texts, tok):
    """Compares octet's ids and decode with HF's, prints the counts and the
    speeds, and returns whether all were equal."""
    model = os.path.join(work, name)
    corpus, speed = os.path.join(work, "corpus.jsonl"), os.path.join(work, "speed.jsonl")
    hf_text_ids, hf_text, hf_speed_ids = hf_results(tok, texts, speed_texts)
    n, equal = len(texts), {}
    for add in (True, False):
        flag = [] if add else ["--add_special=false"]
        ids, _ = run_octet(octet, ["--model", model, "--jsonl", corpus] + flag, n)
        equal[add] = count_equal(name, f"ids (add_special {str(add).lower()})",
                                 texts, hf_text_ids[add], ids)
    decode_in = os.path.join(work, f"{name}-decode.jsonl")  # not in model: tokenizer.json only
    write_jsonl(decode_in, hf_text_ids[True])
    text, _ = run_octet(octet, ["--model", model, "--decode_jsonl", decode_in], n)
    decoded = count_equal(name, "decoded texts", texts, hf_text, text)
    print(f"hf_tokenizers_oracle: {name}: ids equal on {equal[True]} of {n} strings "
          f"(add_special true), {equal[False]} of {n} (false); decode equal on {decoded} of {n}")

    ids, stderr = run_octet(octet, ["--model", model, "--jsonl", speed], len(speed_texts))
    speed_equal = count_equal(name, "speed corpus ids", speed_texts, hf_speed_ids, ids)
    print(f"hf_tokenizers_oracle: {name}: speed corpus ids equal on {speed_equal} "
          f"of {len(speed_texts)} strings (add_special true)")
    hf_mbps = hf_speed(os.path.join(model, "tokenizer.json"), speed_texts)
    print(f"hf_tokenizers_oracle: {name}: tokenize speed octet {octet_speed(stderr)}, "
          f"tokenizers {hf_mbps:.1f} MB/s (one thread, encode_batch)")
    return equal[True] == equal[False] == decoded == n and speed_equal == len(speed_texts)


def describe_without_octet(name, work, texts, speed_texts, tok):
    """What check_with_octet would compare, HF's side computed."""
    model = os.path.join(work, name)
    hf_results(tok, texts, speed_texts)
    hf_mbps = hf_speed(os.path.join(model, "tokenizer.json"), speed_texts)
    print(f"hf_tokenizers_oracle: {name}: would compare with `octet tokenize --model "
          f"{model}` the ids of {len(texts)} strings (add_special true "
          f"and false), the decode of HF's ids, and the ids of {len(speed_texts)} "
          f"speed-corpus strings")
    print(f"hf_tokenizers_oracle: {name}: tokenize speed tokenizers {hf_mbps:.1f} MB/s "
          f"(one thread, encode_batch)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--octet", required=True, help="the octet binary")
    parser.add_argument("--work", required=True, help="a directory to write into")
    parser.add_argument("--no-octet", action="store_true",
                        help="only build the tokenizers, corpora and HF's results")
    args = parser.parse_args()
    if not args.no_octet and not os.access(args.octet, os.X_OK):
        sys.exit(f"hf_tokenizers_oracle: {args.octet} is not an executable")

    training = generated_text(seed=1, n_bytes=400_000)
    texts = test_corpus()
    speed_texts = speed_corpus(texts)
    write_jsonl(os.path.join(args.work, "corpus.jsonl"), texts)
    write_jsonl(os.path.join(args.work, "speed.jsonl"), speed_texts)
    all_equal = True
    for name, train in TRAINERS.items():
        tok = train(training)
        os.makedirs(os.path.join(args.work, name), exist_ok=True)
        tok.save(os.path.join(args.work, name, "tokenizer.json"))
        if args.no_octet:
            describe_without_octet(name, args.work, texts, speed_texts, tok)
        else:
            all_equal &= check_with_octet(args.octet, name, args.work, texts, speed_texts, tok)
    if not args.no_octet:
        all_equal &= check_synthetic(args.octet, args.work, texts, speed_texts)
    sys.exit(0 if all_equal else 1)


def check_synthetic(octet, work, texts, speed_texts):
    """The tokenizer.json `octet make-model --tokenizer json` writes: the
    library must read it, and octet must agree with it there too."""
    name = "octet-make-model"
    subprocess.run([octet, "make-model", "--preset", "tiny", "--tokenizer", "json",
                    "--out", os.path.join(work, name)], check=True,
                   stdout=subprocess.DEVNULL)
    tok = Tokenizer.from_file(os.path.join(work, name, "tokenizer.json"))
    return check_with_octet(octet, name, work, texts, speed_texts, tok)


if __name__ == "__main__":
    main()
