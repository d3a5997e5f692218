"""octet's OpenAI-compatible HTTP API, driven by the real `openai` client.

One coordinator serves SmolLM2-135M-Instruct (GGUF) in FP8 with both APIs
(--port gRPC, --http_port HTTP). Checked, each a function below:

  * /v1/models and /health;
  * a greedy chat completion, unary and streamed, has the text the gRPC API
    gives for the same prompt (rendered by `octet chat-template`, tokenized
    by `octet tokenize`, sent by `octet generate --server`);
  * completions with echo and logprobs score the prompt exactly as `octet
    perplexity --print_logprobs` does, float for float;
  * a stream the client closes cancels its request (the metrics say
    CANCELLED, nothing stays running);
  * bad requests get OpenAI's error object with the right status and the
    field named, through raw HTTP and through the client's exceptions;
  * every `curl` example in docs/serving.md runs and answers;
  * SIGTERM drains: /health turns 503, a stream in flight ends complete,
    the process exits 0.
"""

import argparse
import http.client as http_client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import openai

MAX_TOKENS = 24


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, method, path, body=None, raw=None):
    """(status, parsed JSON body) of one request; raw: bytes to send."""
    data = raw if raw is not None else (
        None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, method=method,
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def metric(port, name, labels=""):
    """A counter or gauge from the Prometheus endpoint (0 when absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        text = r.read().decode()
    pattern = re.escape(name + ("{" + labels + "}" if labels else "")) + \
        r" ([0-9.e+-]+)"
    m = re.search(r"^" + pattern + r"$", text, re.M)
    return float(m.group(1)) if m else 0.0


class Server:
    def __init__(self, args):
        self.args = args
        self.grpc, self.http, self.metrics = free_port(), free_port(), \
            free_port()
        self.log = open(os.path.join(args.work, "coordinator.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(args.bin, "coordinator"), "--model", args.model,
             "--quantization", "fp8", "--device", "cpu",
             "--kv_cache_tokens", "8192", "--port", str(self.grpc),
             "--http_port", str(self.http),
             "--metrics_port", str(self.metrics),
             "--served_model_name", "smollm2"],
            stderr=self.log)
        self.name = "smollm2"
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"the coordinator exited: {self.tail()}")
            try:
                if http(self.http, "GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        sys.exit(f"the coordinator did not serve in 300 s: {self.tail()}")

    def tail(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()[-3000:]

    def octet(self, *argv):
        return subprocess.run([os.path.join(self.args.bin, "octet"), *argv],
                              check=True, capture_output=True,
                              text=True).stdout


def check_models_and_health(s, client):
    assert [m.id for m in client.models.list().data] == [s.name]
    assert http(s.http, "GET", "/health") == (200, {"status": "serving"})
    print("ok: /v1/models lists the model; /health is 200")


def check_chat_matches_grpc(s, client):
    messages = [{"role": "user",
                 "content": "What is the capital of France?"}]
    whole = client.chat.completions.create(
        model=s.name, messages=messages, max_tokens=MAX_TOKENS,
        temperature=0)
    text = whole.choices[0].message.content
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason in ("stop", "length")
    chunks = list(client.chat.completions.create(
        model=s.name, messages=messages, max_tokens=MAX_TOKENS,
        temperature=0, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or ""
                       for c in chunks if c.choices)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].usage.completion_tokens == \
        whole.usage.completion_tokens, (chunks[-1].usage, whole.usage)
    assert streamed == text, (streamed, text)

    path = os.path.join(s.args.work, "messages.json")
    with open(path, "w") as f:
        json.dump(messages, f)
    prompt = s.octet("chat-template", "--model", s.args.model,
                     "--messages", path)
    ids = s.octet("tokenize", "--model", s.args.model, "--text", prompt,
                  "--add_special=false").strip()
    assert len(ids.split(",")) == whole.usage.prompt_tokens, \
        (ids, whole.usage)
    grpc_text = s.octet("generate", "--server", f"127.0.0.1:{s.grpc}",
                        "--prompt_ids", ids, "--max_tokens", str(MAX_TOKENS),
                        "--temperature", "0")
    assert grpc_text.rstrip("\n") == text, (grpc_text, text)
    print(f"ok: chat, unary and streamed, equals the gRPC API's text "
          f"({whole.usage.completion_tokens} tokens): {text!r}")


def check_echo_scores_like_perplexity(s, client):
    with open(s.args.text) as f:
        text = f.read()[:1000]
    path = os.path.join(s.args.work, "prompt.txt")
    with open(path, "w") as f:
        f.write(text)
    r = client.completions.create(model=s.name, prompt=text, max_tokens=0,
                                  echo=True, logprobs=0)
    choice = r.choices[0]
    assert choice.text == text
    assert r.usage.completion_tokens == 0
    scores = choice.logprobs.token_logprobs
    assert scores[0] is None and len(scores) == r.usage.prompt_tokens
    ppl = json.loads(s.octet(
        "perplexity", "--model", s.args.model, "--quantization", "fp8",
        "--device", "cpu", "--text", path,
        "--window", str(r.usage.prompt_tokens), "--print_logprobs"))
    assert ppl["logprobs"] == scores[1:], "echo's logprobs differ"
    print(f"ok: echo + logprobs score {len(scores) - 1} prompt tokens "
          f"exactly as octet perplexity does")


def check_closed_stream_is_cancelled(s, client):
    label = 'code="CANCELLED",finish_reason="none"'
    before = metric(s.metrics, "octet_requests_total", label)
    stream = client.completions.create(
        model=s.name, prompt="Once upon a time", max_tokens=2000,
        stream=True, extra_body={"ignore_eos": True})
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()
    deadline = time.time() + 30
    while time.time() < deadline:
        if (metric(s.metrics, "octet_requests_total", label) == before + 1
                and metric(s.metrics, "octet_requests_running") == 0):
            print("ok: a stream the client closed is cancelled")
            return
        time.sleep(0.1)
    raise AssertionError("the closed stream's request was not cancelled")


def check_errors(s, client):
    def refused(body, status, param, path="/v1/completions"):
        got, answer = http(s.http, "POST", path, body)
        error = answer["error"]
        assert got == status and error["param"] == param and \
            error["message"], (body, got, answer)

    ok = {"model": s.name, "prompt": "Hello"}
    got, answer = http(s.http, "POST", "/v1/completions", raw=b"{not json")
    assert got == 400 and "JSON" in answer["error"]["message"], answer
    refused({**ok, "max_tokens": "ten"}, 400, "max_tokens")
    refused({**ok, "temperature": -1}, 400, "temperature")
    refused({**ok, "max_tokens": 10 ** 9}, 400, "max_tokens")
    refused({**ok, "n": 2}, 400, "n")
    refused({**ok, "surprise": 1}, 400, "surprise")
    refused({**ok, "prompt": [10 ** 6]}, 400, "prompt[0]")
    refused({**ok, "prompt": ["a", "b"]}, 400, "prompt")
    refused({**ok, "stop": [1]}, 400, "stop[0]")
    refused({"model": s.name, "messages": [{"role": "robot",
                                             "content": "hi"}]},
            400, "messages[0].role", "/v1/chat/completions")
    refused({"model": s.name, "messages": []}, 400, "messages",
            "/v1/chat/completions")
    got, answer = http(s.http, "POST", "/v1/completions",
                       {**ok, "model": "gpt-4"})
    assert got == 404 and answer["error"]["code"] == "model_not_found"
    got, answer = http(s.http, "POST", "/v1/completions",
                       raw=b'{"prompt": "' + b"a" * (5 << 20) + b'"}')
    assert got == 413 and answer["error"]["message"], (got, answer)
    got, answer = http(s.http, "GET", "/v1/nothing")
    assert got == 404 and answer["error"]["message"]
    # A body without a length (chunked) is refused before it is read.
    conn = http_client.HTTPConnection("127.0.0.1", s.http, timeout=60)
    conn.request("POST", "/v1/completions", body=iter([b'{"prompt": "x"}']),
                 headers={"Content-Type": "application/json"},
                 encode_chunked=True)
    reply = conn.getresponse()
    assert reply.status == 411, (reply.status, reply.read())
    conn.close()
    for call, error in [
            (lambda: client.completions.create(model=s.name, prompt="x",
                                               n=2), openai.BadRequestError),
            (lambda: client.chat.completions.create(
                model="gpt-4", messages=[{"role": "user", "content": "x"}]),
             openai.NotFoundError)]:
        try:
            call()
        except error:
            continue
        raise AssertionError(f"no {error.__name__}")
    print("ok: bad requests get OpenAI's error object, the field named")


def check_curl_examples(s):
    """Each `curl` command in docs/serving.md, pointed at this server."""
    with open(s.args.serving_md) as f:
        text = f.read()
    commands = re.findall(r"^```sh\n(curl .*?)^```$", text, re.M | re.S)
    assert commands, "docs/serving.md has no curl example"
    for command in commands:
        command = command.replace("localhost:8000", f"127.0.0.1:{s.http}")
        command = command.replace('"model": "smollm2"',
                                  f'"model": "{s.name}"')
        out = subprocess.run(["bash", "-c", command], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0 and out.stdout, (command, out)
        if "data: " in out.stdout:
            assert out.stdout.rstrip().endswith("data: [DONE]"), out.stdout
        else:
            json.loads(out.stdout)
    print(f"ok: the {len(commands)} curl examples of docs/serving.md run")


def check_drain(s, client):
    stream = client.completions.create(
        model=s.name, prompt="Once upon a time", max_tokens=48, stream=True,
        extra_body={"ignore_eos": True})
    chunks = [next(iter(stream))]
    s.proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 10
    while http(s.http, "GET", "/health")[0] != 503:
        assert time.time() < deadline, "/health stayed 200 while draining"
        time.sleep(0.05)
    got, answer = http(s.http, "POST", "/v1/completions",
                       {"model": s.name, "prompt": "x"})
    assert got == 503, (got, answer)
    chunks += list(stream)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "length", finish
    assert s.proc.wait(timeout=120) == 0, s.tail()
    print("ok: SIGTERM drains the HTTP stream in flight, then exits 0")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--serving_md", required=True)
    p.add_argument("--text", required=True)
    args = p.parse_args()
    s = Server(args)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.http}/v1",
                               api_key="unused", max_retries=0)
        check_models_and_health(s, client)
        check_chat_matches_grpc(s, client)
        check_echo_scores_like_perplexity(s, client)
        check_closed_stream_is_cancelled(s, client)
        check_errors(s, client)
        check_curl_examples(s)
        check_drain(s, client)
    except BaseException:
        print(s.tail(), file=sys.stderr)
        raise
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


if __name__ == "__main__":
    main()
