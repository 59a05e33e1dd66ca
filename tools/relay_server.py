#!/usr/bin/env python3
"""A small relay server for memo's tests and demo (Python standard library only).

    relay_server.py --port-file FILE --record FILE [--port N] [--mode ok|500|503|429|400|413|301|302|303|307|308]
                    [--retry-after SECONDS] [--delay SECONDS] [--exit-on-stdin-eof]

POST /notes (Examples/NotesApp) takes a raw body and records {"id" (its Idempotency-Key), "body",
"content_type", "status", "headers" (in order, without Authorization)}, always answering 200. POST /relay takes memo's JSON ({"id", "body", "encoding"}) and answers by mode: ok -> 200,
500 -> 500, 503/429 -> that status with Retry-After, 400 -> 400, 413 -> 413. Every request is appended to the
--record file as a JSON line {"id", "body", "status"}, so tests can count deliveries and
duplicates. --delay makes every POST /relay wait that long before it is answered and recorded (a
slow server). POST /control with {"mode": ..., "retry_after": ..., "delay": ...} switches them at
run time.
It listens on 127.0.0.1 only, writes its port to --port-file, and with --exit-on-stdin-eof
exits when its standard input closes (so a test that dies cannot leave it running).
"""
import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

state = {"mode": "ok", "retry_after": 1, "delay": 0.0}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    record_path = None

    def log_message(self, *args):
        pass

    def _reply(self, status, headers=None, body=b""):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/landing":
            self._landing("GET")
            return
        self._reply(200 if self.path == "/health" else 404)

    def _landing(self, method):
        # Where redirect modes point: a client that follows a redirect shows up here.
        with lock, open(self.record_path, "a") as record:
            record.write(json.dumps({"landing": method, "authorization": self.headers.get("Authorization")}) + "\n")
        self._reply(200)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        if self.path == "/control":
            with lock:
                state.update(json.loads(raw or b"{}"))
            self._reply(204)
            return
        if self.path == "/landing":
            self._landing("POST")
            return
        if self.path == "/notes":
            # Examples/NotesApp's raw-body transport: the note is the body, as text.
            with lock, open(self.record_path, "a") as record:
                record.write(json.dumps({
                    "id": self.headers.get("Idempotency-Key"), "body": raw.decode("utf-8", "replace"),
                    "content_type": self.headers.get("Content-Type"), "status": 200,
                    "headers": [[name, value] for name, value in self.headers.items()
                                if name.lower() != "authorization"],
                }) + "\n")
            self._reply(200)
            return
        if self.path != "/relay":
            self._reply(404)
            return
        try:
            message = json.loads(raw)
        except ValueError:
            self._reply(400)
            return
        with lock:
            mode, retry_after, delay = state["mode"], state["retry_after"], state["delay"]
        if delay > 0:
            time.sleep(delay)
        if mode in ("301", "302", "303", "307", "308"):
            with lock, open(self.record_path, "a") as record:
                record.write(json.dumps({"id": message.get("id"), "status": int(mode)}) + "\n")
            host, port = self.server.server_address[:2]
            self._reply(int(mode), {"Location": f"http://{host}:{port}/landing"})
            return
        status = {"ok": 200, "500": 500, "503": 503, "429": 429, "400": 400, "413": 413}.get(mode, 500)
        with lock, open(self.record_path, "a") as record:
            record.write(json.dumps({"id": message.get("id"), "body": message.get("body"), "status": status}) + "\n")
        headers = {"Retry-After": str(retry_after)} if status in (429, 503) else {}
        self._reply(status, headers)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--mode", default="ok")
    parser.add_argument("--retry-after", type=int, default=1)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--exit-on-stdin-eof", action="store_true")
    args = parser.parse_args()
    # Foundation.Process passes on a blocked signal mask; make sure TERM and INT work.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    state.update(mode=args.mode, retry_after=args.retry_after, delay=args.delay)
    Handler.record_path = args.record
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    if args.exit_on_stdin_eof:
        def watch():
            sys.stdin.read()
            server.shutdown()
        threading.Thread(target=watch, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


if __name__ == "__main__":
    main()
