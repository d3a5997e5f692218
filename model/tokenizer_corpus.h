// Built-in training text for synthetic SentencePiece tokenizers.
#pragma once

#include <string>
#include <vector>

namespace octet {

const std::vector<std::string>& TokenizerCorpus();

}  // namespace octet
