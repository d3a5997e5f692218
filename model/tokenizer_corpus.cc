// The text octet's synthetic tokenizers are trained on (worker/synthetic.h):
// a few paragraphs written for this purpose, with the letters, digits and
// punctuation that prompts in tests and demos use. Small on purpose: the
// tokenizer only has to be a real SentencePiece model, not a good one.
#include "model/tokenizer_corpus.h"

namespace octet {

const std::vector<std::string>& TokenizerCorpus() {
  static const std::vector<std::string> kLines = {
      "The quick brown fox jumps over the lazy dog.",
      "Once upon a time, a small team set out to serve language models fast.",
      "A language model reads a sequence of tokens and predicts the next one.",
      "Each token becomes a vector; each layer mixes the vectors with "
      "attention.",
      "Attention compares every query with every key and averages the values.",
      "The keys and values of past tokens are kept in a cache, block by block.",
      "A scheduler batches requests so that the accelerator is never idle.",
      "Quantization stores weights in eight bits instead of sixteen.",
      "Eight-bit floating point keeps four exponent bits and three mantissa "
      "bits.",
      "The largest finite value is 448; anything larger saturates.",
      "A scale per tensor maps the largest magnitude onto that maximum.",
      "Tensor parallelism splits each layer across several ranks.",
      "The ranks add their partial sums with an all-reduce.",
      "Memory bandwidth, not arithmetic, limits decoding at small batch sizes.",
      "Reading half the bytes makes a memory-bound step nearly twice as fast.",
      "Hello, world! How are you today? I am fine, thank you.",
      "What is the capital of France? Paris is the capital of France.",
      "Write a short poem about the sea, the wind and the stars.",
      "The numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 2048 4096 appear often.",
      "Prices rose by 3.5% in March; in April they fell by 1.25%.",
      "She said: \"Let's meet at 7:30 pm near the station.\"",
      "def add(a, b):\n    return a + b",
      "for (int i = 0; i < n; ++i) { sum += x[i] * y[i]; }",
      "Rivers run to the sea, yet the sea is never full.",
      "In the morning the market opens, and by noon it is crowded.",
      "Good tests fail when the code is wrong and pass when it is right.",
      "Measure twice, cut once; report what you measured, not what you hoped.",
      "Llamas and alpacas live in the mountains of South America.",
      "The mistral is a strong, cold wind that blows through southern France.",
      "Green, blue, red, yellow, orange, purple, black and white are colours.",
      "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday and Sunday.",
      "January, February, March, April, May, June, July, August, September.",
      "October, November and December close the year.",
      "One, two, three, four, five, six, seven, eight, nine, ten.",
      "The server streams tokens back to the client as they are generated.",
      "When a worker fails, the coordinator restarts it and serves again.",
  };
  return kLines;
}

}  // namespace octet
