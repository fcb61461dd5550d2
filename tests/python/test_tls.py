"""The Python client over a mutual-TLS listener of the real devplaced: certificates from TlsOptions
or from DEVPLACE_TLS_*, a server name override, refusals as UNAVAILABLE (certificates made with
the openssl binary, as tests/common/test_pki.cc makes them)."""

import os
import subprocess
import unittest
from unittest import mock

import grpc

import devplace
from devplace_testing import Daemon, TempDir, clean_env, cli, fixture


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True, timeout=60)


def make_ca(dir, name):
    cert, key = dir.file(name + ".pem"), dir.file(name + ".key")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/CN=" + name, "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign", "-keyout", key, "-out", cert)
    return cert, key


def make_leaf(dir, ca, name, san, client):
    cert, key, csr = dir.file(name + ".pem"), dir.file(name + ".key"), dir.file(name + ".csr")
    ext = dir.write(name + ".ext", (f"subjectAltName={san}\n" if san else "") +
                    f"extendedKeyUsage={'clientAuth' if client else 'serverAuth'}\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=" + name,
            "-keyout", key, "-out", csr)
    openssl("x509", "-req", "-days", "1", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-set_serial",
            "0x" + os.urandom(8).hex(), "-extfile", ext, "-out", cert)
    return cert, key


def mutual_tls_daemon(dir, ca, extra_flags=()):
    """devplaced on nvidia-2x-h100 serving, with a mutual-TLS listener beside its unix and TCP ones: its
    certificate (node1, 127.0.0.1) and its clients' are ``ca``'s. Returns (daemon, the TLS target)."""
    server = make_leaf(dir, ca, "node1", "DNS:node1,IP:127.0.0.1", client=False)
    daemon = Daemon(fixture("nvidia-2x-h100"), [
        f"--tls_cert={server[0]}", f"--tls_key={server[1]}", f"--tls_client_ca={ca[0]}"] + list(extra_flags),
        dir=dir.path, extra_listen="tls:127.0.0.1:0")
    daemon.wait_serving()
    return daemon, "127.0.0.1:" + daemon.logged_port("tls:127.0.0.1:")


class MutualTls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = TempDir()
        d = cls.dir
        cls.ca = make_ca(d, "ca")
        cls.client_cert = make_leaf(d, cls.ca, "scheduler", "DNS:scheduler", client=True)
        cls.other_ca = make_ca(d, "other-ca")
        cls.stranger = make_leaf(d, cls.other_ca, "stranger", "DNS:stranger", client=True)
        cls.daemon, cls.target = mutual_tls_daemon(d, cls.ca, ["--refresh_min_interval=0"])

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()
        cls.dir.close()

    def test_options(self):
        tls = devplace.TlsOptions(ca=self.ca[0], cert=self.client_cert[0], key=self.client_cert[1])
        with devplace.Client(self.target, tls=tls) as client:
            self.assertTrue(client.health())
            self.assertEqual(client.inventory().backends[1].devices[0].pci_bus_id, "0000:18:00.0")
            self.assertEqual(client.resolve("inference", "cuda:1", from_environment=False).device, "cuda:1")
            self.assertEqual(len(client.refresh().backends[1].devices), 2)  # mTLS clients may re-probe
            with client.watch() as watch:
                self.assertEqual(next(watch).revision, client.inventory().revision)

    def test_server_name_override(self):
        tls = devplace.TlsOptions(ca=self.ca[0], cert=self.client_cert[0], key=self.client_cert[1],
                                  server_name="node1")
        with devplace.Client(self.target.replace("127.0.0.1", "localhost"), tls=tls) as client:
            self.assertTrue(client.health())

    def test_environment_variables(self):
        variables = {"DEVPLACE_TLS_CA": self.ca[0], "DEVPLACE_TLS_CERT": self.client_cert[0],
                     "DEVPLACE_TLS_KEY": self.client_cert[1]}
        with mock.patch.dict(os.environ, variables):
            with devplace.Client(self.target) as client:
                self.assertTrue(client.health())
            # An option given wins over its variable: a client certificate the daemon does not trust.
            with devplace.Client(self.target, tls=devplace.TlsOptions(cert=self.stranger[0],
                                                                        key=self.stranger[1])) as client:
                with self.assertRaises(devplace.UnavailableError):
                    client.health()
        # The CLI reads the same variables.
        result = cli([f"--address={self.target}", "health"], env=clean_env(variables))
        self.assertEqual((result.returncode, result.stdout), (0, "SERVING\n"), result.stderr)

    def test_refused_handshakes_are_unavailable(self):
        for name, tls in (("no client certificate", devplace.TlsOptions(ca=self.ca[0])),
                          ("untrusted client", devplace.TlsOptions(ca=self.ca[0], cert=self.stranger[0],
                                                                    key=self.stranger[1])),
                          ("wrong CA for the daemon", devplace.TlsOptions(ca=self.other_ca[0], cert=self.client_cert[0],
                                                                          key=self.client_cert[1]))):
            with self.subTest(name), devplace.Client(self.target, tls=tls) as client:
                with self.assertRaises(devplace.UnavailableError) as raised:
                    client.health()
                self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_each_mistake_names_its_cause_and_the_setting_that_fixes_it(self):
        ca, cert, key = self.ca[0], self.client_cert[0], self.client_cert[1]
        cases = (
            ("plaintext to the TLS port", None,
             [f"{self.target} is a TLS listener", "this client spoke plaintext", "pass --tls_ca"]),
            ("no client certificate", devplace.TlsOptions(ca=ca),
             ["requires a client certificate (mutual TLS) and none was given", "--tls_cert and --tls_key"]),
            ("a client certificate from another CA", devplace.TlsOptions(ca=ca, cert=self.stranger[0],
                                                                         key=self.stranger[1]),
             [f"refused the client certificate --tls_cert={self.stranger[0]}", "daemon's --tls_client_ca"]),
            ("the daemon's CA unknown", devplace.TlsOptions(ca=self.other_ca[0], cert=cert, key=key),
             ["the daemon's certificate is not trusted", f"--tls_ca={self.other_ca[0]}"]),
            ("a name the certificate lacks", devplace.TlsOptions(ca=ca, cert=cert, key=key, server_name="node2"),
             ["the daemon's certificate names DNS:node1, IP:127.0.0.1, not node2", "--tls_server_name"]),
            # Before: "did not answer the TLS handshake: it is probably a plaintext listener".
            ("a key that is not the certificate's", devplace.TlsOptions(ca=ca, cert=cert, key=self.stranger[1]),
             [f"the private key --tls_key={self.stranger[1]} does not belong to the client certificate "
              f"--tls_cert={cert}: pass the key that was made with that certificate"]),
        )
        for name, tls, words in cases:
            with self.subTest(name), devplace.Client(self.target, tls=tls) as client:
                with self.assertRaises(devplace.UnavailableError) as raised:
                    client.health()
                for w in words:
                    self.assertIn(w, raised.exception.message)
                self.assertIn("(gRPC: ", raised.exception.message)  # gRPC's own text is kept
        # TLS to the plaintext TCP listener.
        with devplace.Client(self.daemon.tcp_target, tls=devplace.TlsOptions(ca=ca)) as client:
            with self.assertRaises(devplace.UnavailableError) as raised:
                client.health()
            self.assertIn("did not answer the TLS handshake: it is probably a plaintext listener",
                          raised.exception.message)
        # A host name that does not resolve (.invalid never does, RFC 6761); before, only gRPC's text.
        with devplace.Client("nosuchhost.invalid:7466", tls=devplace.TlsOptions(ca=ca), timeout=20) as client:
            with self.assertRaises(devplace.UnavailableError) as raised:
                client.health()
        self.assertTrue(raised.exception.message.startswith("the host name nosuchhost.invalid does not resolve ("),
                        raised.exception.message)
        self.assertIn("dial the daemon's IP address (--address, DEVPLACE_ADDRESS) (gRPC: ", raised.exception.message)


if __name__ == "__main__":
    unittest.main()
