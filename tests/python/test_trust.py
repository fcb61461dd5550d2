"""The Python client's trust rules (check_unix_socket, check_local_listener) against the table
libdevplace is tested with too (tests/client/trust_table.txt; its header says what each column
means): each row builds the real socket and directory, or a listener bound by this process or by
nobody through Debian's setpriv, and compares the error class and the exact message."""

import os
import socket
import subprocess
import unittest

import devplace
from devplace_testing import PYTHON, SOURCE_DIR, TempDir

TABLE = os.path.join(SOURCE_DIR, "tests", "client", "trust_table.txt")
LISTENER = os.path.join(SOURCE_DIR, "tests", "client", "trust_listener.py")
OTHER = 65534  # nobody
CODES = {"OK": None, "NOT_FOUND": devplace.NotFoundError, "FAILED_PRECONDITION": devplace.FailedPreconditionError}


def read_table():
    rows = []
    with open(TABLE, encoding="utf-8") as f:
        for n, line in enumerate(f.read().splitlines(), 1):
            if not line or line.startswith("#"):
                continue
            cols = [c.strip() for c in line.split("|", 3)]
            setup = {}
            for word in cols[1].split():
                key, eq, value = word.partition("=")
                setup[key if eq else "thing"] = value if eq else key
            rows.append((n, cols[0], setup, cols[2], cols[3] if len(cols) > 3 else ""))
    return rows


def uid(who):
    return OTHER if who == "other" else os.geteuid()


class Listener:
    """tests/client/trust_listener.py on ``address`` port 0 as ``owner``; its port in ``port``."""

    def __init__(self, address, owner):
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if owner == "other" else []
        self.process = subprocess.Popen(prefix + [PYTHON, LISTENER, address], stdout=subprocess.PIPE, text=True)
        self.port = int(self.process.stdout.readline())

    def close(self):
        self.process.kill()
        self.process.wait()
        self.process.stdout.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TrustTable(unittest.TestCase):
    def test_both_checks_answer_every_row(self):
        rows = read_table()
        self.assertGreaterEqual(len(rows), 15)
        ran = 0
        for line, check, setup, code, message in rows:
            with self.subTest(line=line):
                if "other" in (setup.get("owner"), setup.get("dir_owner")) and os.geteuid() != 0:
                    continue
                subst = {"{me}": str(os.geteuid()), "{other}": str(OTHER)}
                with TempDir() as tmp:
                    if check == "unix":
                        directory = tmp.file("sockets")
                        path = directory + "/devplace.sock"
                        os.mkdir(directory, 0o755)
                        if setup["thing"] == "socket":
                            with socket.socket(socket.AF_UNIX) as s:
                                s.bind(path)
                        elif setup["thing"] == "file":
                            open(path, "w").close()
                        if setup["thing"] != "missing":
                            os.lchown(path, uid(setup["owner"]), -1)
                        os.chown(directory, uid(setup["dir_owner"]), -1)
                        os.chmod(directory, int(setup["dir_mode"], 8))
                        subst.update({"{path}": path, "{dir}": directory})
                        call = lambda: devplace.check_unix_socket(path)  # noqa: E731
                    else:
                        self.assertEqual(check, "tcp")
                        listener = None if setup["listen"] == "none" else Listener(setup["listen"], setup["owner"])
                        if listener is not None:
                            self.addCleanup(listener.close)
                        port = listener.port if listener else free_port()
                        target = setup["target"]
                        address = f"[{target}]:{port}" if ":" in target else f"{target}:{port}"
                        subst["{address}"] = address
                        call = lambda: devplace.check_local_listener(address)  # noqa: E731
                    for key, value in subst.items():
                        message = message.replace(key, value)
                    if CODES[code] is None:
                        call()
                    else:
                        with self.assertRaises(CODES[code]) as raised:
                            call()
                        self.assertEqual(raised.exception.message, message)
                    ran += 1
        print(f"{ran} of {len(rows)} rows run")

    def test_only_numeric_loopback_addresses_are_checked(self):
        for address in ("10.0.0.1:7465", "localhost:7465", "127.0.0.1", "127.0.0.1:0", "[::2]:7465"):
            with self.assertRaises(devplace.InvalidArgumentError) as raised:
                devplace.check_local_listener(address)
            self.assertEqual(raised.exception.message,
                             f"address '{address}': want a loopback host:port, e.g. 127.0.0.1:7465 or [::1]:7465")


if __name__ == "__main__":
    unittest.main()
