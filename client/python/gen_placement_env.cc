// devplace_py_gen: writes the Python module devplace/_placement_env.py from libdevplace's own
// PlacementEnvironmentVariables(), so the Python client's environment capture uses the very list
// ResolveOptions::FromEnvironment() uses (one source, no copy kept by hand), and the distributions
// of JobPythonPackages() that devplace.job_environment() looks for.
// Usage: devplace_py_gen OUTPUT.py
#include <cstdio>
#include <fstream>
#include <string>

#include "devplace/client.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: devplace_py_gen OUTPUT.py\n");
    return 2;
  }
  std::ofstream out(argv[1], std::ios::trunc);
  out << "# Generated at build time by devplace_py_gen (client/python/gen_placement_env.cc) from\n"
         "# libdevplace's devplace::PlacementEnvironmentVariables(). Do not edit.\n"
         "\"\"\"The environment variables the daemon reads from ResolveDeviceRequest.env, in libdevplace's order.\"\"\"\n"
         "\n"
         "PLACEMENT_ENVIRONMENT_VARIABLES = (\n";
  for (const std::string& name : devplace::PlacementEnvironmentVariables()) out << "    \"" << name << "\",\n";
  out << ")\n"
         "\n"
         "# devplace::kMaxCapturedNearMisses: at most this many near misses of those names are captured.\n"
         "MAX_CAPTURED_NEAR_MISSES = "
      << devplace::kMaxCapturedNearMisses
      << "\n"
         "\n"
         "# devplace::JobPythonPackages(): the distributions (PEP 503 names) whose metadata describes a job.\n"
         "JOB_PYTHON_PACKAGES = (\n";
  for (const std::string& name : devplace::JobPythonPackages()) out << "    \"" << name << "\",\n";
  out << ")\n";
  out.close();
  if (!out) {
    std::fprintf(stderr, "devplace_py_gen: cannot write %s\n", argv[1]);
    return 1;
  }
  return 0;
}
