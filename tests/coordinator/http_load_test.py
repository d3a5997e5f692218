"""A load test of the OpenAI-compatible HTTP API, with the real `openai`
client: CLIENTS streaming clients for SECONDS seconds against one
coordinator (the tiny preset, FP8), a quarter of their streams closed
early by the client. Then:

  * no client saw an error (a closed stream is not one);
  * no request leaked: every request the server took ended OK or
    CANCELLED, no more cancelled than streams closed, and nothing is left
    running or waiting;
  * the coordinator's RSS stayed flat: the median over the last third of
    the run within 10 % (and 16 MiB) of the median over the first third
    after warm-up;
  * SIGTERM with streams in flight drains them complete and exits 0.

  http_load_test.py --bin BUILD/bin --work DIR [--clients 64] [--seconds 40]
"""

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time

import openai

from openai_client_test import free_port, http, metric


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = self.closed = self.finished = 0
        self.errors = []

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)


def client_loop(port, stop, tally, seed):
    rng = random.Random(seed)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1",
                           api_key="unused", max_retries=0, timeout=120)
    while not stop.is_set():
        max_tokens = rng.randint(8, 64)
        close_after = rng.randint(1, max_tokens) if rng.random() < 0.25 \
            else None
        try:
            stream = client.completions.create(
                model="tiny", prompt=f"client {seed} says", stream=True,
                max_tokens=max_tokens, temperature=1.0,
                extra_body={"ignore_eos": True})
            tally.add(requests=1)
            chunks = 0
            finish = None
            for chunk in stream:
                chunks += 1
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
                if close_after is not None and chunks >= close_after:
                    break
            if close_after is not None and finish is None:
                stream.close()
                tally.add(closed=1)
            elif finish != "length":
                tally.add(errors=[f"finish_reason {finish!r}"])
            else:
                tally.add(finished=1)
        except Exception as e:  # anything but a closed stream is an error
            tally.add(errors=[repr(e)])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--seconds", type=float, default=40)
    args = p.parse_args()

    model = os.path.join(args.work, "tiny")
    subprocess.run([os.path.join(args.bin, "octet"), "make-model", "--preset",
                    "tiny", "--tokenizer", "json", "--out", model],
                   check=True, capture_output=True)
    port, metrics = free_port(), free_port()
    log = open(os.path.join(args.work, "coordinator.log"), "w")
    proc = subprocess.Popen(
        [os.path.join(args.bin, "coordinator"), "--model", model,
         "--quantization", "fp8", "--device", "cpu", "--port",
         str(free_port()), "--http_port", str(port), "--metrics_port",
         str(metrics), "--served_model_name", "tiny", "--max_running",
         str(args.clients), "--kv_cache_tokens", "16384",
         "--drain_timeout", "120s"], stderr=log)

    def fail(message):
        log.flush()
        with open(log.name) as f:
            sys.stderr.write(f.read()[-3000:])
        proc.kill()
        sys.exit(f"http_load_test: {message}")

    deadline = time.time() + 120
    while True:
        try:
            if http(port, "GET", "/health")[0] == 200:
                break
        except OSError:
            pass
        if time.time() > deadline or proc.poll() is not None:
            fail("the coordinator did not serve")
        time.sleep(0.2)

    tally, stop = Tally(), threading.Event()
    threads = [threading.Thread(target=client_loop,
                                args=(port, stop, tally, i))
               for i in range(args.clients)]
    for t in threads:
        t.start()
    samples = []  # (seconds since start, RSS MiB)
    start = time.time()
    while time.time() - start < args.seconds:
        time.sleep(0.5)
        samples.append((time.time() - start, rss_mib(proc.pid)))
    stop.set()
    for t in threads:
        t.join(timeout=180)

    # Nothing left behind once the clients are done.
    deadline = time.time() + 30
    while (metric(metrics, "octet_requests_running") != 0 or
           metric(metrics, "octet_requests_waiting") != 0):
        if time.time() > deadline:
            fail("requests were left running or waiting")
        time.sleep(0.1)
    ok = sum(metric(metrics, "octet_requests_total",
                    f'code="OK",finish_reason="{r}"')
             for r in ("length", "eos", "stop"))
    cancelled = metric(metrics, "octet_requests_total",
                       'code="CANCELLED",finish_reason="none"')
    third = args.seconds / 3
    warm = min(10.0, third)
    early = [m for t, m in samples if warm <= t < warm + third]
    late = [m for t, m in samples if t >= args.seconds - third]
    early_mib, late_mib = statistics.median(early), statistics.median(late)
    report = {"clients": args.clients, "seconds": args.seconds,
              "requests": tally.requests, "finished": tally.finished,
              "closed_by_client": tally.closed, "server_ok": ok,
              "server_cancelled": cancelled, "errors": len(tally.errors),
              "rss_mib_early": round(early_mib, 1),
              "rss_mib_late": round(late_mib, 1)}
    print(json.dumps(report))
    if tally.errors:
        fail(f"{len(tally.errors)} client errors, e.g. {tally.errors[:3]}")
    if ok + cancelled != tally.requests or cancelled > tally.closed:
        fail("the server's requests do not add up to the clients'")
    if tally.closed == 0 or tally.finished == 0:
        fail("the run was too short to close and finish streams")
    if late_mib > early_mib * 1.10 and late_mib - early_mib > 16:
        fail(f"RSS grew from {early_mib:.1f} to {late_mib:.1f} MiB")

    # SIGTERM with streams in flight: they end complete, the process 0.
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1",
                           api_key="unused", max_retries=0)
    streams = [client.completions.create(
        model="tiny", prompt="drain", stream=True, max_tokens=32,
        extra_body={"ignore_eos": True}) for _ in range(8)]
    firsts = [next(iter(s)) for s in streams]
    proc.send_signal(signal.SIGTERM)
    for first, s in zip(firsts, streams):
        finish = [c.choices[0].finish_reason for c in [first, *s]
                  if c.choices]
        if finish[-1] != "length":
            fail(f"a stream in flight at SIGTERM ended {finish[-1]!r}")
    if proc.wait(timeout=120) != 0:
        fail("the coordinator did not exit 0 after draining")
    print("http_load_test: ok")


if __name__ == "__main__":
    main()
