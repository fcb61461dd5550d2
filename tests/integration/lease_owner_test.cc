// What a lease's owner can do with it from another shell: see its id in `devplace inventory`
// (another user sees it hidden), give it a new time to live with `devplace renew`, and release it.
// A real daemon on a fake 2-GPU host; the users are real processes under other uids (setpriv).
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/integration/shared_host.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// `devplace inventory --json` as the user `as` runs it, parsed.
v1::Inventory InventoryAs(const SharedHost& host, const std::string& as) {
  const CommandResult r = RunCommand(as + host.Cli() + " inventory --json");
  v1::Inventory inventory;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &inventory).ok()) << r.out;
  return inventory;
}

// A user picks a GPU for an hour and loses the pick's output; they find the lease's id in the
// inventory, renew it and release it. Another user sees the lease without its id and may neither
// renew nor release it (knowing the id); a lease held for a process is not renewed.
TEST(LeaseOwner, AUserWhoLostAPicksOutputFindsTheLeaseIdThenRenewsAndReleasesIt) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to run commands as other users (setpriv)";
  SharedHost host(2, {});
  const std::string nobody = host.AsNobody();
  if (nobody.empty()) GTEST_SKIP() << "setpriv missing, or nobody cannot reach " << DEVPLACE_CLI_BINARY;
  const std::string other = "setpriv --reuid=12345 --regid=12345 --clear-groups ";
  const std::string cli = host.Cli();
  ASSERT_EQ(RunCommand(nobody + cli + " pick --no_environment --ttl=1m >/dev/null 2>&1").exit_code, 0);

  const v1::Inventory own = InventoryAs(host, nobody);
  ASSERT_EQ(own.leases_size(), 1);
  const std::string id = own.leases(0).lease_id();
  ASSERT_EQ(id.size(), 32u) << "the owner does not see its lease's id";
  EXPECT_EQ(own.leases(0).uid(), 65534u);
  const int64_t first_expiry = own.leases(0).expires_at().seconds();
  EXPECT_THAT(RunCommand(nobody + cli + " inventory").out, HasSubstr(id));

  const v1::Inventory seen = InventoryAs(host, other);
  ASSERT_EQ(seen.leases_size(), 1);
  EXPECT_EQ(seen.leases(0).lease_id(), "");
  EXPECT_THAT(RunCommand(other + cli + " inventory").out, HasSubstr("(hidden)"));
  CommandResult r = RunCommand(other + cli + " renew --lease_id=" + id + " --ttl=2h");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("PERMISSION_DENIED"));
  EXPECT_EQ(RunCommand(other + cli + " release --lease_id=" + id).exit_code, 1);

  const absl::Time before = absl::Now();
  r = RunCommand(nobody + cli + " renew --lease_id=" + id + " --ttl=2h --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::LeaseInfo renewed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &renewed).ok()) << r.out;
  EXPECT_EQ(renewed.lease_id(), id);
  EXPECT_GE(renewed.expires_at().seconds(), absl::ToUnixSeconds(before + absl::Hours(2)) - 1);
  EXPECT_GT(renewed.expires_at().seconds(), first_expiry + 3000);
  EXPECT_EQ(InventoryAs(host, nobody).leases(0).expires_at().seconds(), renewed.expires_at().seconds());
  r = RunCommand(nobody + cli + " renew --lease_id=" + id);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("renewed lease ", id, " (1 device(s)) until ")));

  r = RunCommand(nobody + cli + " release --lease_id=" + id);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(InventoryAs(host, nobody).leases_size(), 0);
  r = RunCommand(nobody + cli + " renew --lease_id=" + id);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("NOT_FOUND"));

  // A lease held for a process lasts as long as the process: renew says so.
  r = host.Script("eval \"$(devplace pick --no_environment 2>/dev/null)\"\n"
                  "id=$(devplace inventory --json | sed -n 's/.*\"leaseId\": \"\\([0-9a-f]*\\)\".*/\\1/p')\n"
                  "devplace renew --lease_id=\"$id\" 2>&1 || echo renew-refused\n");
  EXPECT_THAT(r.out, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(r.out, HasSubstr("is held for a process and lasts as long as it"));
  EXPECT_THAT(r.out, HasSubstr("renew-refused"));
}

// Bad flags are usage errors naming the flag and the accepted forms, before any call.
TEST(LeaseOwner, RenewRefusesABadTtlOrLeaseId) {
  for (const char* flags : {"--lease_id=abc --ttl=25h", "--lease_id=abc --ttl=500ms", "--ttl=1h"}) {
    const CommandResult r = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " renew ", flags));
    EXPECT_EQ(r.exit_code, 2) << flags;
    EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("--ttl="), HasSubstr("--lease_id=''"))) << flags;
  }
}

}  // namespace
}  // namespace devplace::testing
