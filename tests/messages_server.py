"""A real local HTTP server that speaks the Anthropic Messages API, with scripted replies.

Each scripted step is a reply text or one of:
  ("status", code)          an API error with that HTTP status
  ("sleep", seconds[, step]) a late answer (a client timeout), then the step
  ("hang",)                 never answers (until the server stops)
  ("trickle", seconds)      a 200 whose body comes one byte every ``seconds``, never ending
  ("raw", code, bytes)      any body at all (not JSON, not a Message)
  ("stop", reason, text)    a reply with that stop_reason (e.g. "max_tokens")
Requests are kept, so tests can check what the client sent (and that no key
leaked into files).
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               429: "rate_limit_error", 500: "api_error", 529: "overloaded_error",
               503: "api_error"}


class MessagesServer:
    def __init__(self, script=None, default: str | None = None):
        self.script = list(script or [])
        self.default = default
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()  # releases hanging and trickling answers
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                with server.lock:
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    step = server.script.pop(0) if server.script else server.default
                if step is None:
                    return self._error(400, "no scripted reply left")
                if isinstance(step, tuple) and step[0] == "sleep":
                    time.sleep(step[1])
                    step = step[2] if len(step) > 2 else "late"
                if isinstance(step, tuple) and step[0] == "status":
                    return self._error(step[1], f"scripted {step[1]}")
                if isinstance(step, tuple) and step[0] == "hang":
                    server.stopping.wait()
                    return None
                if isinstance(step, tuple) and step[0] == "trickle":
                    return self._trickle(step[1])
                if isinstance(step, tuple) and step[0] == "raw":
                    return self._raw(step[1], step[2])
                stop = "end_turn"
                if isinstance(step, tuple) and step[0] == "stop":
                    stop, step = step[1], step[2]
                text = step(body) if callable(step) else step
                usage = {"input_tokens": sum(len(json.dumps(m)) for m in body["messages"]) // 4,
                         "output_tokens": len(text) // 4}
                self._json(200, {"id": f"msg_{len(server.requests)}", "type": "message",
                                 "role": "assistant", "model": body.get("model"),
                                 "content": [{"type": "text", "text": text}],
                                 "stop_reason": stop, "stop_sequence": None,
                                 "usage": usage})

            def _trickle(self, every):
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "1000000")
                self.end_headers()
                try:
                    while not server.stopping.wait(every):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _raw(self, code, data):
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, code, message):
                self._json(code, {"type": "error", "error": {
                    "type": ERROR_TYPES.get(code, "api_error"), "message": message}},
                    {"retry-after": "0"} if code == 429 else None)

            def _json(self, code, obj, headers=None):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", "req_test")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except BrokenPipeError:
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
