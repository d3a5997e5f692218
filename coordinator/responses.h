// The engine's output (Delta, Outcome: engine.h) into the public API's
// response messages, unary and streaming alike.
#pragma once

#include "coordinator/engine.h"
#include "octet/v1/generation.pb.h"

namespace octet {

inline v1::FinishReason ToProto(Finish f) {
  switch (f) {
    case Finish::kEos:
      return v1::FINISH_REASON_EOS;
    case Finish::kStop:
      return v1::FINISH_REASON_STOP;
    case Finish::kLength:
      break;
  }
  return v1::FINISH_REASON_LENGTH;
}

// Appends new output to a GenerateResponse or GenerateStreamResponse.
template <typename M>
void AddDelta(const Delta& d, M* m) {
  m->mutable_text()->append(d.text);
  m->mutable_token_ids()->Add(d.token_ids.begin(), d.token_ids.end());
  m->mutable_logprobs()->Add(d.logprobs.begin(), d.logprobs.end());
  m->mutable_prompt_logprobs()->Add(d.prompt_logprobs.begin(),
                                    d.prompt_logprobs.end());
}

// Usage and timings of a finished request into a response message.
template <typename M>
void SetOutcome(const Outcome& o, M* m) {
  m->set_finish_reason(ToProto(o.finish));
  m->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(o.prompt_tokens));
  m->mutable_usage()->set_completion_tokens(
      static_cast<uint32_t>(o.completion_tokens));
  m->mutable_timings()->set_time_to_first_token_seconds(
      o.time_to_first_token_seconds);
  m->mutable_timings()->set_total_seconds(o.total_seconds);
}

}  // namespace octet
