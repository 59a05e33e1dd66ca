#!/usr/bin/env python3
"""A mock telemetry server for tests and the demo (Python standard library only).

    telemetry_server.py --port-file FILE --record FILE [--token TOKEN] [--mode MODE]
                        [--retry-after SECONDS] [--host 127.0.0.1] [--port N] [--exit-on-stdin-eof]
                        [--record-bodies]

POST /v1/telemetry/batch must carry Content-Type: application/json, Content-Encoding: gzip,
Authorization: Bearer <TOKEN> and an Idempotency-Key; the body must gunzip to
{"events": [...]} where each event has a UUID id, an ISO 8601 UTC ts with milliseconds, a string
type, an object payload and a string session_id. A batch that breaks any of these gets 400 and is
recorded as malformed.

Modes: ok (200), 429 and 503 (with Retry-After), 500, 400, 401, 403, 404 (a wrong endpoint), 413, hang (never answers), drop
(closes the connection without answering), slow (200 after --delay seconds, default 5). POST /control {"mode": ..., "retry_after": ...,
"token": ...} changes them at run time. Every request is appended to --record as a JSON line:
{"status", "ids", "idempotency_key", "bytes", "malformed"}, plus "body" (the gunzipped body as
text, byte for byte) with --record-bodies.
"""
import argparse
import gzip
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

state = {"mode": "ok", "retry_after": 1, "token": "test-token", "delay": 5.0}
lock = threading.Lock()
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def check_batch(headers, raw, token):
    """Returns (ids, problem) where problem is None for a well-formed batch."""
    if headers.get("Content-Type") != "application/json":
        return [], "content-type"
    if headers.get("Content-Encoding") != "gzip":
        return [], "content-encoding"
    if headers.get("Authorization") != f"Bearer {token}":
        return [], "unauthorized"
    if not headers.get("Idempotency-Key"):
        return [], "idempotency-key"
    try:
        body = json.loads(gzip.decompress(raw))
    except (OSError, ValueError):
        return [], "gzip-or-json"
    events = body.get("events") if isinstance(body, dict) else None
    if not isinstance(events, list) or not events:
        return [], "events"
    ids = []
    for event in events:
        if not isinstance(event, dict):
            return ids, "event"
        try:
            uuid.UUID(event.get("id", ""))
        except ValueError:
            return ids, "id"
        if not TS.match(str(event.get("ts", ""))):
            return ids, "ts"
        if not isinstance(event.get("type"), str) or not isinstance(event.get("payload"), dict):
            return ids, "type-or-payload"
        if not isinstance(event.get("session_id"), str):
            return ids, "session_id"
        ids.append(event["id"])
    return ids, None


class Handler(BaseHTTPRequestHandler):
    record_path = None
    record_bodies = False

    def log_message(self, *args):
        pass

    def _reply(self, status, headers=None):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _record(self, entry):
        with lock, open(self.record_path, "a") as record:
            record.write(json.dumps(entry) + "\n")

    def do_GET(self):
        self._reply(200 if self.path == "/health" else 404)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/control":
            with lock:
                state.update(json.loads(raw or b"{}"))
            self._reply(204)
            return
        if self.path != "/v1/telemetry/batch":
            self._reply(404)
            return
        with lock:
            mode, retry_after, token = state["mode"], state["retry_after"], state["token"]
        if mode == "hang":
            time.sleep(3600)
            return
        if mode == "slow":
            time.sleep(state["delay"])
            mode = "ok"
        if mode == "drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        ids, problem = check_batch(self.headers, raw, token)
        if problem == "unauthorized":
            status = 401
        elif problem:
            status = 400
        else:
            status = {"ok": 200, "429": 429, "503": 503, "500": 500, "400": 400, "401": 401, "403": 403, "404": 404,
                      "413": 413}.get(mode, 500)
        entry = {"status": status, "ids": ids, "idempotency_key": self.headers.get("Idempotency-Key"),
                 "bytes": len(raw), "malformed": problem if problem != "unauthorized" else None}
        if self.record_bodies:
            try:
                entry["body"] = gzip.decompress(raw).decode("utf-8")
            except (OSError, ValueError):
                entry["body"] = None
        self._record(entry)
        self._reply(status, {"Retry-After": str(retry_after)} if status in (429, 503) else None)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--token", default="test-token")
    parser.add_argument("--mode", default="ok")
    parser.add_argument("--retry-after", type=int, default=1)
    parser.add_argument("--delay", type=float, default=5.0)
    parser.add_argument("--exit-on-stdin-eof", action="store_true")
    parser.add_argument("--record-bodies", action="store_true")
    args = parser.parse_args()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    state.update(mode=args.mode, retry_after=args.retry_after, token=args.token, delay=args.delay)
    Handler.record_path = args.record
    Handler.record_bodies = args.record_bodies
    open(args.record, "a").close()
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    if args.exit_on_stdin_eof:
        def watch():
            sys.stdin.read()
            os._exit(0)
        threading.Thread(target=watch, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main()
