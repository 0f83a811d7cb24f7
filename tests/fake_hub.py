"""A local HTTP server standing in for the Hugging Face hub (tests/unit/inputs/test_gguf_hub.py,
tests/unit/surfaces/test_cli_quant_pick.py): it answers huggingface_hub's model_info (``/api/models/ORG/NAME``: the
files and their sizes at one commit, the 404 with the hub's ``X-Error-Code``) and the resolve URLs with byte ranges
(RFC 9110 section 14: ``Range: bytes=A-B`` answered 206 with ``Content-Range``), serving the files of a folder, and
logs what each resolve request sent."""

from __future__ import annotations

import json
import re
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = "someone/Tiny-GGUF"
PLAIN = "someone/Plain"  # a repository of safetensors only
SHA = "0123456789abcdef0123456789abcdef01234567"


class _Hub(BaseHTTPRequestHandler):
    root: Path
    ranges: bool  # False: a server that ignores Range and sends the whole file
    log: list  # (path, range header, bytes sent) of each resolve request

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == f"/api/models/{REPO}":
            files = sorted(p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file())
            return self._json({"id": REPO, "sha": SHA, "siblings": [
                {"rfilename": f, "size": (self.root / f).stat().st_size} for f in files]})
        if path == f"/api/models/{PLAIN}":
            return self._json({"id": PLAIN, "sha": SHA, "siblings": [
                {"rfilename": "config.json", "size": 2}, {"rfilename": "model.safetensors", "size": 8}]})
        prefix = f"/{REPO}/resolve/{SHA}/"
        if not path.startswith(prefix) or not (self.root / path[len(prefix):]).is_file():
            return self._send(404, b'{"error": "Repository not found"}',
                              {"Content-Type": "application/json", "X-Error-Code": "RepoNotFound"})
        data = (self.root / path[len(prefix):]).read_bytes()
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if m is None or not self.ranges:
            return self._send(200, data, {}, path)
        start, end = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
        self._send(206, data[start:end + 1], {"Content-Range": f"bytes {start}-{end}/{len(data)}"}, path)

    def _json(self, obj):
        self._send(200, json.dumps(obj).encode(), {"Content-Type": "application/json"})

    def _send(self, code, body, headers, logged=None):
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if logged is not None:
            self.log.append((logged, self.headers.get("Range"), len(body)))


@contextmanager
def fake_hub(root, ranges: bool = True):
    """Serve the files under ``root`` as repository REPO at commit SHA: yields (endpoint URL, log)."""
    handler = type("Hub", (_Hub,), {"root": Path(root), "ranges": ranges, "log": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.log
    finally:
        server.shutdown()
        server.server_close()
