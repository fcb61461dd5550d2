"""`cmake --install` of the devplace_python component: the package lands where Debian's python3
finds it (lib/python3.<minor>/dist-packages under a prefix such as /usr/local, lib/python3/dist-packages
under /usr, as in the .deb) and works from there against the real devplaced."""

import os
import sys
import unittest

from devplace_testing import BINARY_DIR, PYTHON, Daemon, TempDir, clean_env, fixture, run

CMAKE = os.environ.get("DEVPLACE_CMAKE", "cmake")
MINOR = "%d.%d" % sys.version_info[:2]


def files_under(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


class Install(unittest.TestCase):
    def test_prefix_layout_and_import(self):
        with TempDir() as dir:
            prefix = dir.file("opt")
            result = run([CMAKE, "--install", BINARY_DIR, "--component", "devplace_python", "--prefix", prefix])
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            site = os.path.join(prefix, "lib", f"python{MINOR}", "dist-packages")
            installed = files_under(os.path.join(site, "devplace"))
            self.assertEqual(installed, ["__init__.py", "_client.py", "_connect_diagnosis.py", "_device_metadata.py",
                                         "_grpc_connection.py", "_pick.py", "_placement_env.py",
                                         "_python_environment.py", "_read.py",
                                         "_resolution.py", "_resolve_options.py", "_target.py", "errors.py",
                                         "py.typed", "v1/__init__.py", "v1/devplace_pb2.py",
                                         "v1/devplace_pb2_grpc.py"])
            self.assertTrue(os.path.isfile(os.path.join(prefix, "share", "doc", "devplace", "examples",
                                                        "pod_entrypoint.py")))
            with Daemon(fixture("cpu-only")) as daemon:
                daemon.wait_serving()
                env = clean_env({"PYTHONPATH": site, "DEVPLACE_ADDRESS": daemon.tcp_target})
                code = ("import devplace; print(devplace.__file__); "
                        "print(devplace.resolve_device('training'))")
                imported = run([PYTHON, "-c", code], env=env, cwd="/")
                self.assertEqual(imported.returncode, 0, imported.stderr)
                self.assertEqual(imported.stdout.splitlines(), [os.path.join(site, "devplace", "__init__.py"), "cpu"])

    def test_usr_prefix_is_debians_dist_packages(self):
        with TempDir() as dir:
            env = clean_env({"DESTDIR": dir.file("root")})
            result = run([CMAKE, "--install", BINARY_DIR, "--component", "devplace_python", "--prefix", "/usr"],
                         env=env)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            self.assertTrue(os.path.isfile(dir.file("root/usr/lib/python3/dist-packages/devplace/v1/devplace_pb2.py")))
            self.assertFalse(os.path.exists(dir.file(f"root/usr/lib/python{MINOR}")))


if __name__ == "__main__":
    unittest.main()
