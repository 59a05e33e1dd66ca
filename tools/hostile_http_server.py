#!/usr/bin/env python3
"""A hostile HTTP(S) server for the HTTP client's tests (Python standard library only).

    hostile_http_server.py --port-file FILE --record FILE --mode MODE [--host 127.0.0.1]
                           [--redirect-to URL] [--cert PEM --key PEM] [--exit-on-stdin-eof]

Every request is appended to --record as a JSON line {"method", "path", "authorization", "bytes"}
("authorization" is true when the request carried that header; its value is never written).

Modes (each answers every request the same way):
  ok             200, empty body
  endless        200 with a chunked body that never ends
  gzip-bomb      200, Content-Encoding: gzip, a 256 KiB body that inflates to 256 MiB
  trickle        200 status line, then one header byte every 0.2 s, forever
  hang           reads the request and never answers
  redirect-301, redirect-302, redirect-303, redirect-307, redirect-308
                 that status with Location: --redirect-to
  huge-headers   200 with 50,000 headers of 100 bytes each
  truncated-headers  a 200 status line and one header, then the connection closes
  stray-200      the first request gets 200 and, 50 ms later, a second unasked-for 200 on the
                 same connection; every later request gets 503
With --cert/--key the server speaks TLS (HTTPS).
"""
import argparse
import gzip
import io
import json
import os
import signal
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
settings = {}


def bomb():
    """256 KiB of gzip that inflates to 256 MiB of zeros (deflate's best ratio is about 1030:1)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9) as stream:
        block = bytes(1 << 20)
        for _ in range(256):
            stream.write(block)
    return buffer.getvalue()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _record(self, size):
        line = {"method": self.command, "path": self.path, "authorization": "Authorization" in self.headers,
                "bytes": size}
        with lock:
            with open(settings["record"], "a") as f:
                f.write(json.dumps(line) + "\n")

    def _read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self):
        self._answer()

    def do_POST(self):
        self._answer()

    def _answer(self):
        body = self._read_body()
        self._record(len(body))
        mode = settings["mode"]
        try:
            if mode == "ok":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif mode == "endless":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b"x" * 65536
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            elif mode == "gzip-bomb":
                data = settings["bomb"]
                self.send_response(200)
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif mode == "trickle":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                self.wfile.flush()
                while True:
                    time.sleep(0.2)
                    self.wfile.write(b"a")
                    self.wfile.flush()
            elif mode == "hang":
                time.sleep(3600)
            elif mode.startswith("redirect-"):
                self.send_response(int(mode.split("-")[1]))
                self.send_header("Location", settings["redirect_to"])
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif mode == "truncated-headers":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n")
                self.wfile.flush()
                self.close_connection = True
            elif mode == "stray-200":
                with lock:
                    settings["count"] = settings.get("count", 0) + 1
                    first = settings["count"] == 1
                if first:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    self.wfile.flush()
                    time.sleep(0.05)
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    self.wfile.flush()
                else:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
            elif mode == "huge-headers":
                self.send_response(200)
                for index in range(50000):
                    self.send_header("X-Filler-%d" % index, "y" * 100)
                self.send_header("Content-Length", "0")
                self.end_headers()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--redirect-to", default="http://127.0.0.1:9/landing")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--exit-on-stdin-eof", action="store_true")
    args = parser.parse_args()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    settings.update(mode=args.mode, record=args.record, redirect_to=args.redirect_to)
    if args.mode == "gzip-bomb":
        settings["bomb"] = bomb()
    open(args.record, "a").close()
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer((args.host, 0), Handler)
    if args.cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    if args.exit_on_stdin_eof:
        def watch():
            sys.stdin.read()
            os._exit(0)
        threading.Thread(target=watch, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
