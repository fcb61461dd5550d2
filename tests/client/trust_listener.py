"""A TCP listener for the trust-table tests: binds argv[1] on a free port (IPv6 wildcards dual-stack),
prints the port, and holds it until killed. Run as nobody through setpriv for the rows owned by
"other"."""
import socket
import sys
import time

host = sys.argv[1]
family = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(family, socket.SOCK_STREAM)
if family == socket.AF_INET6:
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.bind((host, 0))
s.listen(8)
print(s.getsockname()[1], flush=True)
time.sleep(120)
