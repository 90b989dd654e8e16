"""The local LLM server that `cargo xtask llm start` launches: llama.cpp's HTTP server through xllamacpp.

It serves the OpenAI-compatible API (`/v1/chat/completions`, `/v1/completions`) and `/health` on 127.0.0.1 until it
receives SIGTERM or SIGINT, then exits with status 0. `cargo xtask llm` starts it detached, with its output going to
`$RAGTUNE_HOME/llm/server.log`, and records it in `$RAGTUNE_HOME/llm/server.json`.

    python llm_server.py --model /path/to/model.gguf --port 8080

One thread for generation: on the 2-core machines this project targets, two threads made generation 5 to 15 times
slower under load (see models-and-llm.md). `--threads N` threads read the prompt (default 1): one large batch, which
two idle cores read about 1.85 times faster than one. `cargo xtask llm start` passes every core; `cargo xtask ci`,
whose tests run beside the server, passes 1.
"""

import argparse
import os
import signal
import sys
import threading


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="path of the GGUF weights")
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--alias", help="the model name the API reports (default: the file name)")
    parser.add_argument("--threads", type=int, default=1, help="threads that read the prompt (default 1)")
    args = parser.parse_args()

    # A new session, so that a Ctrl-C or a closed terminal in the shell that ran `cargo xtask llm start` does not
    # reach the server; only `cargo xtask llm stop` (SIGTERM) ends it.
    try:
        os.setsid()
    except OSError:
        pass  # Already a session or process-group leader: detached enough.

    stop = threading.Event()

    def on_signal(signum, _frame):
        print(f"llm_server: received {signal.Signals(signum).name}, shutting down", flush=True)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    if not os.path.isfile(args.model):
        print(f"llm_server: no model at {args.model}: run `cargo xtask llm start` to provision it", flush=True)
        return 1

    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = args.model
    if args.alias:
        p.model_alias = {args.alias}
    p.n_ctx = 4096
    p.n_parallel = 1
    p.cpuparams.n_threads = 1
    p.cpuparams_batch.n_threads = max(1, args.threads)
    p.hostnames = ["127.0.0.1"]
    p.port = args.port
    p.ui = False
    p.offline = True

    print(f"llm_server: pid {os.getpid()}, loading {args.model}, port {args.port}", flush=True)
    server = xlc.Server(p)
    print(f"llm_server: serving on http://127.0.0.1:{args.port}", flush=True)

    # The HTTP server runs on threads of its own; this thread only waits. A timeout keeps signal handlers running
    # promptly on every Python version.
    while not stop.wait(timeout=1.0):
        pass
    del server
    print("llm_server: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
