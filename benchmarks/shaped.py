#!/usr/bin/env python
"""A shaped bucket: a loopback TCP proxy in front of an S3 server (moto) that
holds each answer's first byte until ``--latency`` seconds after its request
came in, and caps each connection at ``--bandwidth`` bytes/s; many
connections run side by side.

    python benchmarks/shaped.py --upstream 127.0.0.1:PORT --latency 0.02 --bandwidth 100e6

With ``--mirror DIR``, range GETs of objects copied to ``DIR/bucket/key``
are answered by the proxy from that copy (with the server's ETag), shaped
the same: moto reads a whole object for every range GET (tens of ms of CPU
for a 40 MB object), which would measure moto, not the reader. Everything
else (listings, stats, whole-object GETs) goes to the server.

It prints the port it listens on. ``GET /__stats`` answers the GETs seen so
far and the body bytes sent in answer to them as JSON (``{"gets": n,
"shard_gets": n, "bytes": n, "shard_bytes": n}``; shard GETs: paths holding
``.tfrecord-`` and not ``.index``, whole objects and ranges alike) without
reaching the server, and ``kinds``: every request counted by kind
(``LIST``, ``HEAD``, ``GET index``, ``GET data``, ``GET other``, ``PUT``,
...; see :func:`kind_of`). ``GET /__log`` answers each request seen since
the last ``/__log`` as ``[seconds since the epoch it came in, kind]``. The
latency and bandwidth can be changed while it runs: ``GET /__shape?latency=
0.05&bandwidth=1e8``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import urllib.parse


class Shape:
    def __init__(self, latency: float, bandwidth: float) -> None:
        self.latency, self.bandwidth = latency, bandwidth
        self.gets = self.shard_gets = 0
        self.bytes = self.shard_bytes = 0  # body bytes sent in answer to GETs
        self.kinds: dict[str, int] = {}  # requests by kind_of
        self.log: list[tuple[float, str]] = []  # (time.time() it came in, kind) since the last /__log

    def seen(self, method: str, target: str) -> None:
        kind = kind_of(method, target)
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self.log.append((time.time(), kind))

    def sent(self, shard: bool, count: int) -> None:
        self.bytes += count
        if shard:
            self.shard_bytes += count


def kind_of(method: str, target: str) -> str:
    """A request's kind: ``LIST`` (a GET of a bucket with a query: a
    listing), ``GET index`` (an object whose name holds ``.index``), ``GET
    data`` (any other object), ``HEAD``, or the method and ``other``."""
    path, _, query = target.partition("?")
    is_object = "/" in path.strip("/")
    if method == "GET" and not is_object:
        return "LIST" if query else "GET other"
    if method == "GET":
        return "GET index" if ".index" in path else "GET data"
    if method == "HEAD":
        return "HEAD"
    return f"{method} other"


def _control(line: bytes, shape: Shape) -> bytes | None:
    """The answer to a control request, or None for a request to forward."""
    parts = line.split()
    if len(parts) < 2 or not parts[1].startswith(b"/__"):
        return None
    url = urllib.parse.urlparse(parts[1].decode())
    if url.path == "/__shape":
        query = urllib.parse.parse_qs(url.query)
        shape.latency = float(query.get("latency", [shape.latency])[0])
        shape.bandwidth = float(query.get("bandwidth", [shape.bandwidth])[0])
    if url.path == "/__log":
        log, shape.log = shape.log, []
        body = json.dumps(log).encode()
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    body = json.dumps({"gets": shape.gets, "shard_gets": shape.shard_gets, "bytes": shape.bytes,
                       "shard_bytes": shape.shard_bytes, "latency": shape.latency,
                       "bandwidth": shape.bandwidth, "kinds": shape.kinds}).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


async def _send(writer: asyncio.StreamWriter, data: bytes, asked: float, shape: Shape,
                counted: bool | None = None) -> None:
    """``data`` to the client: its first byte ``shape.latency`` after the
    request came in, then at most ``shape.bandwidth`` bytes/s. The body bytes
    that left (a client may hang up early) are counted unless ``counted`` is
    None, as a shard's when it is True."""
    loop = asyncio.get_running_loop()
    wait = asked + shape.latency - loop.time()
    if wait > 0:
        await asyncio.sleep(wait)
    started = loop.time()
    sent = 0
    try:
        for i in range(0, len(data), 65536):
            ahead = started + i / shape.bandwidth - loop.time()
            if ahead > 0:
                await asyncio.sleep(ahead)
            writer.write(data[i:i + 65536])
            await writer.drain()
            sent = min(i + 65536, len(data))
    finally:
        if counted is not None:
            shape.sent(counted, max(0, sent - (data.find(b"\r\n\r\n") + 4)))


async def _forward(head: bytes, body: bytes, upstream: tuple) -> bytes:
    """The server's whole answer to one request (sent on a connection of its own)."""
    lines = [line for line in head.split(b"\r\n") if line and not line.lower().startswith(b"connection:")]
    reader, writer = await asyncio.open_connection(*upstream)
    writer.write(b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


class Mirror:
    """Range GETs of objects answered from a local copy (``folder/bucket/key``),
    with the ETag and Last-Modified the server gives them."""

    def __init__(self, folder: str | None, upstream: tuple) -> None:
        self.folder, self.upstream = folder, upstream
        self.meta: dict[str, bytes] = {}  # path -> its ETag and Last-Modified header lines

    async def answer(self, method: str, path: str, headers: dict, head: bytes) -> bytes | None:
        if self.folder is None or method != "GET" or "range" not in headers or "?" in path:
            return None
        file = os.path.join(self.folder, urllib.parse.unquote(path).lstrip("/"))
        if not os.path.isfile(file):
            return None
        if path not in self.meta:  # the client's own request, as a HEAD: signed as the client signs
            lines = [line for line in head.split(b"\r\n")[1:] if not line.lower().startswith(b"range:")]
            got = await _forward(b"\r\n".join([f"HEAD {path} HTTP/1.1".encode(), *lines]), b"", self.upstream)
            kept = [line for line in got.split(b"\r\n") if line.lower().startswith((b"etag:", b"last-modified:"))]
            self.meta[path] = b"\r\n".join(kept)
        size = os.path.getsize(file)
        first, _, last = headers["range"].split("=", 1)[1].partition("-")
        start, end = int(first), min(int(last) if last else size - 1, size - 1)
        if start >= size:
            return (b"HTTP/1.1 416 Requested Range Not Satisfiable\r\nContent-Length: 0\r\n"
                    b"Content-Range: bytes */" + str(size).encode() + b"\r\n\r\n")
        with open(file, "rb") as f:
            f.seek(start)
            data = f.read(end - start + 1)
        lines = [b"HTTP/1.1 206 Partial Content", b"Content-Type: binary/octet-stream", b"Accept-Ranges: bytes",
                 *filter(None, self.meta[path].split(b"\r\n")), f"Content-Range: bytes {start}-{end}/{size}".encode(),
                 f"Content-Length: {len(data)}".encode()]
        return b"\r\n".join(lines) + b"\r\n\r\n" + data


async def _serve(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter, upstream: tuple,
                 shape: Shape, mirror: Mirror) -> None:
    loop = asyncio.get_running_loop()
    try:
        while True:
            try:
                head = (await client_reader.readuntil(b"\r\n\r\n"))[:-4]
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            asked = loop.time()
            lines = head.decode("latin-1").split("\r\n")
            method, target = lines[0].split(" ")[:2]
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            body = await client_reader.readexactly(int(headers.get("content-length", 0)))
            control = _control(lines[0].encode(), shape)
            if control is not None:
                client_writer.write(control)
                await client_writer.drain()
                return
            shape.seen(method, target)
            shard = ".tfrecord-" in target and ".index" not in target
            if method == "GET":
                shape.gets += 1
                shape.shard_gets += shard
            answer = await mirror.answer(method, target, headers, head)
            if answer is None:
                answer = await _forward(head, body, upstream)
            await _send(client_writer, answer, asked, shape, shard if method == "GET" else None)
            if b"connection: close" in answer.split(b"\r\n\r\n", 1)[0].lower():
                return
    except (ConnectionError, OSError):
        pass
    finally:
        client_writer.close()


async def _main(args: argparse.Namespace) -> None:
    host, port = args.upstream.rsplit(":", 1)
    shape = Shape(args.latency, args.bandwidth)
    mirror = Mirror(args.mirror, (host, int(port)))
    server = await asyncio.start_server(lambda r, w: _serve(r, w, (host, int(port)), shape, mirror), "127.0.0.1",
                                        args.port, limit=1 << 20)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", required=True, help="host:port of the S3 server")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds to an answer's first byte")
    parser.add_argument("--bandwidth", type=float, default=100e6, help="bytes/s per connection")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mirror", help="a folder holding copies of objects as bucket/key: their range GETs "
                                         "are answered from it (moto reads a whole object for each range)")
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
