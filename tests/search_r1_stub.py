"""A stand-in for Search-R1's own retrieval server (``search_r1/search/retrieval_server.py``),
backed by a real retriever: POST ``/retrieve`` only, with its request
(``{"queries", "topk", "return_scores"}``) and its answer shape (``{"result": [[{"document":
{"id", "contents"}, "score"}, ...], ...]}``); every other path is FastAPI's 404, so there is
no ``/health``. Tests that need "Search-R1's server on 127.0.0.1" use it."""

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def search_r1_server(retriever, answer=None):
    """Serve ``retriever`` (anything with ``search(queries, k) -> [[Hit]]``) as Search-R1 does;
    yields ``(base_url, requests_seen)``. ``answer``: a fixed JSON reply to every search
    instead (to test what a client makes of a malformed one)."""
    seen: list = []

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, payload) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 - http.server's name
            self._send(404, {"detail": "Not Found"})

        def do_POST(self):  # noqa: N802
            if self.path != "/retrieve":
                return self._send(404, {"detail": "Not Found"})
            req = json.loads(self.rfile.read(int(self.headers["content-length"])))
            seen.append(req)
            if answer is not None:
                return self._send(200, answer)
            hits = retriever.search(list(req["queries"]), k=int(req.get("topk") or 3))
            result = [[{"document": {"id": h.doc_id, "contents": h.contents}, "score": h.score}
                       for h in row] for row in hits]
            if not req.get("return_scores"):
                result = [[item["document"] for item in row] for row in result]
            self._send(200, {"result": result})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
