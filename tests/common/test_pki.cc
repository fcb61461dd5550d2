#include "tests/common/test_pki.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "tests/common/command.h"

namespace devplace::testing {
namespace {

void Run(const std::string& command) {
  const CommandResult r = RunCommand(command);
  if (r.exit_code != 0) {
    std::fprintf(stderr, "openssl failed (%d): %s\n%s%s\n", r.exit_code, command.c_str(), r.out.c_str(), r.err.c_str());
    std::abort();
  }
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace

CertFiles MakeCa(const std::string& dir, const std::string& name) {
  CertFiles ca{dir + "/" + name + ".pem", dir + "/" + name + ".key"};
  Run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=" + name +
      " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign -keyout " + Quote(ca.key) +
      " -out " + Quote(ca.cert) + " 2>&1");
  return ca;
}

CertFiles MakeLeaf(const std::string& dir, const CertFiles& ca, const std::string& name, const std::string& san,
                   bool client) {
  CertFiles leaf{dir + "/" + name + ".pem", dir + "/" + name + ".key"};
  const std::string ext = dir + "/" + name + ".ext";
  {
    std::ofstream out(ext);
    if (!san.empty()) out << "subjectAltName=" << san << "\n";
    out << "extendedKeyUsage=" << (client ? "clientAuth" : "serverAuth") << "\n";
  }
  const std::string csr = dir + "/" + name + ".csr";
  Run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=" + name + " -keyout " +
      Quote(leaf.key) + " -out " + Quote(csr) + " 2>&1");
  Run("openssl x509 -req -days 1 -in " + Quote(csr) + " -CA " + Quote(ca.cert) + " -CAkey " + Quote(ca.key) +
      " -set_serial 0x$(od -An -N8 -tx1 /dev/urandom | tr -d ' \\n') -extfile " + Quote(ext) + " -out " +
      Quote(leaf.cert) + " 2>&1");
  return leaf;
}

}  // namespace devplace::testing
