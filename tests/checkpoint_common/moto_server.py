"""Runs moto's S3 server on 127.0.0.1:<port> for rockstate's tests (tests/checkpoint_common/s3.rs).

Prints "ready" once it serves; stops when stdin closes, so the server never outlives the test
process that started it (the test harness keeps the pipe open until it exits)."""
import sys
from moto.server import ThreadedMotoServer
port = int(sys.argv[1])
server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
server.start()
print("ready", flush=True)
sys.stdin.read()
server.stop()
