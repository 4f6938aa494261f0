"""A fault-injecting TCP proxy on loopback (asyncio), for the chaos runner.

Each FaultProxy listens on 127.0.0.1:<port> and forwards every connection to
a target. Its mode can be changed at any time from another thread:
  ok         forward as is
  latency    sleep `arg` seconds before forwarding each chunk (both ways)
  bandwidth  at most `arg` bytes/s each way
  reset      forward `arg` bytes of each connection's responses, then reset it (RST)
  blackhole  accept, read and drop everything, answer nothing, never close
  refuse     reset new connections at once and drop open ones (a peer that is down)
TLS passes through untouched (the proxy sees bytes only)."""
import asyncio
import socket
import struct
import threading


class FaultProxy:
    def __init__(self, loop, target_port, name):
        self.loop, self.target_port, self.name = loop, target_port, name
        self.mode, self.arg = "ok", 0.0
        self.conns = set()
        self.server = None
        self.port = None
        self.bytes = 0
        self.resets = 0

    def set(self, mode, arg=0.0):
        """Thread-safe: switch the mode; open connections follow at once."""
        def apply():
            self.mode, self.arg = mode, arg
            if mode in ("refuse",):
                for w in list(self.conns):
                    self._rst(w)
        self.loop.call_soon_threadsafe(apply)

    @staticmethod
    def _rst(writer):
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        writer.transport.abort()

    async def start(self):
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _pipe(self, reader, writer, down, peer):
        sent = 0  # response bytes of this connection (mode reset)
        try:
            while True:
                data = await reader.read(16384)
                if not data:
                    break
                while self.mode == "blackhole":
                    await asyncio.sleep(0.05)  # swallowed: the sender sees nothing come back
                if self.mode == "latency":
                    await asyncio.sleep(self.arg)
                elif self.mode == "bandwidth" and self.arg > 0:
                    await asyncio.sleep(len(data) / self.arg)
                elif self.mode == "reset" and down:
                    if sent + len(data) > self.arg:  # mid-body: part of it, then RST both ways
                        writer.write(data[: max(0, int(self.arg) - sent)])
                        self._rst(writer)
                        self._rst(peer)
                        self.resets += 1
                        return
                    sent += len(data)
                elif self.mode == "refuse":
                    self._rst(writer)
                    self._rst(peer)
                    return
                self.bytes += len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def _handle(self, creader, cwriter):
        if self.mode == "refuse":
            self._rst(cwriter)
            return
        try:
            ureader, uwriter = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            self._rst(cwriter)
            return
        self.conns.add(cwriter)
        self.conns.add(uwriter)
        try:
            await asyncio.gather(self._pipe(creader, uwriter, False, cwriter),
                                 self._pipe(ureader, cwriter, True, uwriter))
        finally:
            self.conns.discard(cwriter)
            self.conns.discard(uwriter)


class ProxyHost:
    """An asyncio loop in a daemon thread holding the proxies."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def proxy(self, target_port, name):
        p = FaultProxy(self.loop, target_port, name)
        asyncio.run_coroutine_threadsafe(p.start(), self.loop).result(10)
        return p

    def retarget(self, p, port):
        self.loop.call_soon_threadsafe(setattr, p, "target_port", port)
