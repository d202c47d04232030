#!/usr/bin/env python3
"""A scripted OpenAI-compatible model server for end-to-end agent sessions without a model.

Serves POST /v1/chat/completions (streamed, as cutesmith asks for it) with the replies of a
replay transcript (`[[reply]] text = '''...'''`, as `cutesmith run --replay` takes), one per
request in order; past the last one it answers a reply with no code (the session then
stops on its own rules). Usage is reported in the final chunk (about 4 characters per
token), so sessions show a cost. Every request is appended to LOG as one JSON line
(messages' sizes and the first 200 characters of the last message).

    python3 scripts/scripted-model-server.py TRANSCRIPT.toml PORT LOG
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def load_replies(path):
    text = open(path, encoding="utf-8").read()
    try:
        import tomllib

        return [r["text"] for r in tomllib.loads(text)["reply"]]
    except ImportError:
        # Python < 3.11: the transcript's one construct, text = '''...''' under [[reply]].
        replies = []
        for part in text.split("[[reply]]")[1:]:
            start = part.index("'''") + 3
            body = part[start : part.index("'''", start)]
            replies.append(body[1:] if body.startswith("\n") else body)
        return replies


REPLIES = load_replies(sys.argv[1])
PORT = int(sys.argv[2])
LOG = sys.argv[3]
LOCK = threading.Lock()
COUNT = [0]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        with LOCK:
            i = COUNT[0]
            COUNT[0] += 1
            msgs = body.get("messages", [])
            with open(LOG, "a", encoding="utf-8") as f:
                f.write(json.dumps({
                    "request": i,
                    "model": body.get("model"),
                    "authorized": self.headers.get("Authorization", "").startswith("Bearer "),
                    "message_chars": [len(m.get("content") or "") for m in msgs],
                    "last": (msgs[-1].get("content") or "")[:200] if msgs else "",
                }) + "\n")
        text = REPLIES[i] if i < len(REPLIES) else "No further changes: the kernel is done.\n"
        prompt_chars = sum(len(m.get("content") or "") for m in body.get("messages", []))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def chunk(obj):
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        base = {"id": f"scripted-{i}", "object": "chat.completion.chunk", "created": 0,
                "model": body.get("model", "scripted")}
        for s in range(0, len(text), 400):
            chunk({**base, "choices": [{"index": 0, "delta": {"content": text[s : s + 400]},
                                        "finish_reason": None}]})
        chunk({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        chunk({**base, "choices": [], "usage": {
            "prompt_tokens": prompt_chars // 4, "completion_tokens": len(text) // 4,
            "total_tokens": prompt_chars // 4 + len(text) // 4}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
