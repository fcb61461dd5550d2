// P-PICK's steps alone (server/placement/pick_internal.h): the row, the job's units, each judged,
// the comparator that orders them and the first `count` picked, the explanation and the refusal,
// the mask written, checked and handed out, and the job's answer with it. pick_test.cc holds the
// whole Pick() to the rule; these hold each step to its own part of it.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/backends.h"
#include "server/placement/pick.h"
#include "server/placement/pick_internal.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/pick_test_util.h"
#include "tests/placement/request_builder.h"

namespace devplace::testing {
namespace {

using placement::Backends;
using placement::BackendSpec;
using placement::DescribeUnit;
using placement::kMaxPickDeviceLines;
using placement::kMaxRefusalDeviceLines;
using placement::kMaxRefusalLineChars;
using placement::LeasedUnit;
using placement::VisibleUnit;
using placement::pick_internal::AnswerWith;
using placement::pick_internal::Better;
using placement::pick_internal::Candidate;
using placement::pick_internal::CheckMask;
using placement::pick_internal::Chosen;
using placement::pick_internal::ExplainCandidates;
using placement::pick_internal::HandOut;
using placement::pick_internal::JobView;
using placement::pick_internal::Judge;
using placement::pick_internal::MaskFor;
using placement::pick_internal::MaskForm;
using placement::pick_internal::MaskFormOf;
using placement::pick_internal::PickLeastUsed;
using placement::pick_internal::PickMask;
using placement::pick_internal::PickRow;
using placement::pick_internal::TooFewFree;
using placement::pick_internal::ViewOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

const auto CUDA = v1::ROW_CUDA_NVIDIA;

// An eligible candidate with this usage at position `job_index` of the pool.
Candidate Ranked(uint32_t processes, uint64_t used, int job_index, bool degraded = false) {
  Candidate c;
  c.eligible = true;
  c.processes = processes;
  c.used = used;
  c.job_index = job_index;
  c.degraded = degraded;
  return c;
}

std::vector<int> Hosts(const std::vector<VisibleUnit>& units) {
  std::vector<int> out;
  for (const VisibleUnit& u : units) out.push_back(static_cast<int>(u.device->host_index()));
  return out;
}

// ---- step 4: the comparator ----

// Each key decides when the keys before it tie, whatever the later keys say: in every pair `a`
// comes first, although each later key alone would put `b` first.
TEST(PickRank, BetterDecidesByEachKeyOnlyWhereTheKeysBeforeItTie) {
  struct Pair {
    const char* key;
    Candidate a, b;
  };
  const std::vector<Pair> pairs = {
      {"1. fewest processes, over more memory in use and a later place", Ranked(0, 60 * kGiB, 7), Ranked(1, 0, 0)},
      {"1. fewest processes (2 against 3)", Ranked(2, 10 * kGiB, 3), Ranked(3, kGiB, 1)},
      {"1. fewest processes, over health (an idle GPU may read DEGRADED for its link speed)",
       Ranked(0, 0, 1, /*degraded=*/true), Ranked(1, 0, 0)},
      {"2. processes tie: OK before DEGRADED, over more memory in use and a later place", Ranked(0, 9 * kGiB, 3),
       Ranked(0, 0, 0, /*degraded=*/true)},
      {"3. processes and health tie: least memory in use, over a later place", Ranked(1, kGiB, 5),
       Ranked(1, 2 * kGiB, 0)},
      {"3. processes and health tie: unknown memory in use counts 0", Ranked(0, 0, 4), Ranked(0, 1, 2)},
      {"4. processes, health and memory tie: the job's order", Ranked(2, 3 * kGiB, 1), Ranked(2, 3 * kGiB, 2)},
  };
  for (const Pair& p : pairs) {
    SCOPED_TRACE(p.key);
    EXPECT_TRUE(Better(p.a, p.b));
    EXPECT_FALSE(Better(p.b, p.a));
    EXPECT_FALSE(Better(p.a, p.a));  // irreflexive: a strict weak ordering for std::sort
  }
}

TEST(PickRank, PickLeastUsedMarksTheFirstCountEligibleInBetterOrder) {
  std::vector<Candidate> candidates = {Ranked(0, 0, 0), Ranked(2, 0, 1), Ranked(0, 5 * kGiB, 2), Ranked(0, kGiB, 3)};
  candidates[0].eligible = false;  // least used of all, but set aside
  EXPECT_EQ(PickLeastUsed(candidates, 2), 2u);
  std::vector<bool> picked;
  for (const Candidate& c : candidates) picked.push_back(c.picked);
  EXPECT_THAT(picked, ElementsAre(false, false, true, true));

  for (Candidate& c : candidates) c.picked = false;
  EXPECT_EQ(PickLeastUsed(candidates, 5), 3u);  // fewer eligible than wanted: all of them
  EXPECT_FALSE(candidates[0].picked);
  EXPECT_TRUE(candidates[1].picked);
}

// ---- step 4: the explanation and the refusal ----

TEST(PickRank, ExplainCandidatesSaysPickedFreeOrWhyAndNamesDevicesOutsideThePool) {
  InventoryBuilder inv;
  inv.Add(CUDA, 3);
  const v1::Backend& backend = inv.Build().backends(1);
  const std::vector<VisibleUnit> pool = {{&backend.devices(0), -1, nullptr}, {&backend.devices(2), -1, nullptr}};
  std::vector<Candidate> candidates = {Ranked(0, 0, 0), Ranked(0, 0, 1)};
  for (size_t i = 0; i < pool.size(); ++i) {
    candidates[i].unit = pool[i];
    candidates[i].why = "no process";
  }
  candidates[0].picked = true;
  v1::PickDevicesResponse out;
  std::vector<std::string> refusal = ExplainCandidates(candidates, 1, 1, backend, pool, out);
  EXPECT_THAT(out.explanation(),
              ElementsAre("P-PICK host device 0 (0000:20:00.0): picked (no process)",
                          "P-PICK host device 2 (0000:22:00.0): not picked: 1 less used device(s) came first "
                          "(no process)",
                          "P-PICK host device 1 (0000:21:00.0): not the job's (its masks, device nodes or allocation "
                          "leave it out, or it is not usable: see the steps above)"));
  EXPECT_THAT(refusal, ElementsAre("host device 0 (0000:20:00.0): picked (no process)",
                                   "host device 2 (0000:22:00.0): not picked: 1 less used device(s) came first (no "
                                   "process)"));
  // Two wanted, one picked: the picked one is only free (the pick is refused).
  out.Clear();
  candidates[1].eligible = false;
  candidates[1].why = "not picked: leased (a TTL lease)";
  refusal = ExplainCandidates(candidates, 1, 2, backend, pool, out);
  EXPECT_THAT(refusal, ElementsAre("host device 0 (0000:20:00.0): free (no process)",
                                   "host device 2 (0000:22:00.0): not picked: leased (a TTL lease)"));
}

TEST(PickRank, ExplainCandidatesKeepsAtMost64LinesAnd16ForTheRefusal) {
  InventoryBuilder inv;
  inv.Add(CUDA, 70);
  const v1::Backend& backend = inv.Build().backends(1);
  std::vector<VisibleUnit> pool;
  std::vector<Candidate> candidates;
  for (int i = 0; i < 70; ++i) {
    pool.push_back({&backend.devices(i), -1, nullptr});
    candidates.push_back(Ranked(0, 0, i));
    candidates.back().unit = pool.back();
  }
  v1::PickDevicesResponse out;
  const std::vector<std::string> refusal = ExplainCandidates(candidates, 0, 1, backend, pool, out);
  ASSERT_EQ(out.explanation_size(), kMaxPickDeviceLines + 1);
  EXPECT_EQ(out.explanation(kMaxPickDeviceLines), "P-PICK ... and 6 more unit(s)");
  EXPECT_EQ(refusal.size(), static_cast<size_t>(kMaxRefusalDeviceLines));
}

TEST(PickRank, TooFewFreeSaysWhetherAWaitCanHelpAndWhichAdviceFits) {
  InventoryBuilder inv;
  inv.Add(CUDA, 2);
  const v1::Backend& backend = inv.Build().backends(1);
  const std::vector<std::string> refusal = {"host device 0: a", "host device 1: b"};
  struct Case {
    const char* what;
    std::vector<Candidate> candidates;
    uint32_t count;
    bool allow_shared;
    uint64_t min_free;
    bool no_free_device;
    std::vector<std::string> words;
    std::vector<std::string> absent;
  };
  Candidate leased = Ranked(0, 0, 0);
  leased.eligible = false;
  leased.taken = true;
  Candidate in_use = Ranked(1, kGiB, 1);
  in_use.eligible = false;
  in_use.taken = true;
  Candidate unusable = Ranked(0, 0, 1);
  unusable.eligible = false;
  unusable.unusable = true;
  unusable.unit = {&backend.devices(1), -1, nullptr};  // named apart in both refusals
  Candidate free_unknown = Ranked(0, 0, 0);
  free_unknown.eligible = false;
  free_unknown.free_unknown = true;
  const std::vector<Case> cases = {
      {"more than the job may ever use", {leased, unusable}, 2, false, 0, false,
       {"P-PICK 2 cuda/nvidia device(s) wanted, but the job may use only 1 (its masks, device nodes or allocation, "
        "and the host's usable devices; not usable: host device 1 (0000:21:00.0)): host device 0: a; host device 1: b; "
        "ask for at most 1"}, {}},
      {"none usable: no 'ask for at most'", {unusable}, 1, false, 0, false, {"the job may use only 0"}, {"at most"}},
      {"min_free with every free memory unknown", {free_unknown, unusable}, 1, false, 40 * kGiB, false,
       {"P-PICK --min_free (min_free_bytes 40.0 GiB) needs each device's free memory, and it is unknown for all 1 "
        "cuda/nvidia device(s)"}, {}},
      {"leased: wait", {leased, Ranked(0, 0, 1)}, 2, false, 0, true,
       {"P-PICK 2 free cuda/nvidia device(s) wanted, 1 free for this job now (2 it may use): host device 0: a; "
        "host device 1: b; retry later or wait for one (devplace pick --wait=D ... or devplace run --wait=D -- CMD, "
        "Python wait=S, wait_ms), ask for fewer"}, {"allow sharing"}},
      // Counted as the refusal above counts: the usable units the job may use, the unusable named apart.
      {"leased beside an unusable one: it is not counted", {leased, unusable}, 1, false, 0, true,
       {"P-PICK 1 free cuda/nvidia device(s) wanted, 0 free for this job now (1 it may use; not usable: host "
        "device 1 (0000:21:00.0)): "}, {"2 it may use"}},
      {"in use: wait or share", {leased, in_use}, 1, false, 0, true,
       {"retry later or wait for one (devplace pick --wait=D ... or devplace run --wait=D -- CMD, Python wait=S, "
        "wait_ms), allow sharing (devplace --shared, Python allow_shared=True, allow_shared), ask for fewer"}, {}},
      {"in use, shared allowed: no sharing advice", {leased, in_use}, 1, true, 0, true, {"ask for fewer"},
       {"allow sharing"}},
      {"min_free with some free memory known", {free_unknown, Ranked(0, 0, 1)}, 2, false, kGiB, true,
       {"ask for less free memory (devplace --min_free, Python min_free=, min_free_bytes), ask for fewer"}, {"retry later"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::PickDevicesRequest request;
    request.set_allow_shared(c.allow_shared);
    request.set_min_free_bytes(c.min_free);
    size_t picked = 0;
    for (const Candidate& k : c.candidates) picked += k.eligible ? 1 : 0;
    bool no_free_device = false;
    const absl::Status s = TooFewFree(c.candidates, refusal, picked, c.count, request, backend, no_free_device);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(no_free_device, c.no_free_device);
    for (const std::string& w : c.words) EXPECT_THAT(std::string(s.message()), HasSubstr(w));
    for (const std::string& w : c.absent) EXPECT_THAT(std::string(s.message()), Not(HasSubstr(w)));
  }
  // Candidates past the refusal's lines are counted.
  std::vector<Candidate> many(20, leased);
  bool no_free_device = false;
  EXPECT_THAT(TooFewFree(many, refusal, 0, 1, {}, backend, no_free_device).message(),
              HasSubstr("host device 1: b; ... and 18 more; retry later"));
  // A long line (a FAULT GPU's reason lists every critical XID) is cut: the advice after it stays
  // within what the CLI prints whole.
  const std::vector<std::string> long_lines(2, "host device 0: " + std::string(2000, 'x'));
  const std::string message(TooFewFree(std::vector<Candidate>(2, leased), long_lines, 0, 1, {}, backend,
                                       no_free_device).message());
  EXPECT_THAT(message, HasSubstr(absl::StrCat("host device 0: ", std::string(kMaxRefusalLineChars - 15, 'x'),
                                              "... (devplace inventory shows the rest); host device 0: ")));
  EXPECT_THAT(message, HasSubstr("(devplace inventory shows the rest); retry later"));
  EXPECT_THAT(message, Not(HasSubstr(std::string(kMaxRefusalLineChars - 14, 'x'))));
  EXPECT_THAT(message, ::testing::EndsWith("ask for fewer"));
  EXPECT_LT(message.size(), 1000u);
}

// ---- step 3: each unit judged ----

TEST(PickCandidates, JudgeSetsAsideForTheFirstReasonInTheRulesOrder) {
  struct Case {
    const char* what;
    std::function<void(InventoryBuilder&)> state;  // device 0 of 2 cuda
    std::vector<LeasedUnit> leased;
    bool allow_shared = false;
    uint64_t min_free = 0;
    int sub_device = -1;
    bool eligible = false;
    bool taken = false;
    std::string why;  // what Candidate::why starts with
  };
  const std::string bus = "0000:20:00.0";
  const auto busy = [](InventoryBuilder& inv) {
    Use(inv, CUDA, 0, 1, kGiB);
    inv.Device(CUDA, 0).mutable_usage()->set_busy(true);
    inv.Device(CUDA, 0).mutable_usage()->set_compute_mode(v1::DEVICE_USAGE_COMPUTE_MODE_EXCLUSIVE_PROCESS);
  };
  const std::vector<Case> cases = {
      {.what = "not usable, also leased",
       .state = [](InventoryBuilder& inv) {
         inv.Device(CUDA, 0).set_usable(false);
         inv.Device(CUDA, 0).set_unusable_reason("fell off the bus");
       },
       .leased = {{CUDA, bus, -1, "", "x"}}, .eligible = false, .taken = false,
       .why = "not picked: not usable (fell off the bus)"},
      {.what = "leased, also busy", .state = busy, .leased = {{CUDA, bus, -1, "", "pid 7's lease"}}, .eligible = false,
       .taken = true, .why = "not picked: leased (pid 7's lease)"},
      {.what = "a lease on another device", .state = [](InventoryBuilder& inv) { Use(inv, CUDA, 0, 0, 0); },
       .leased = {{CUDA, "0000:21:00.0", -1, "", "x"}}, .eligible = true, .taken = false,
       .why = "no process, 0.0 GiB used, 80.0 GiB free of 80.0 GiB"},
      {.what = "a lease of another row", .state = [](InventoryBuilder& inv) { Use(inv, CUDA, 0, 0, 0); },
       .leased = {{v1::ROW_CUDA_AMD, bus, -1, "", "x"}}, .eligible = true, .taken = false, .why = "no process"},
      {.what = "busy, also shared", .state = busy, .allow_shared = true, .eligible = false, .taken = true,
       .why = "not picked: busy (1 process, exclusive-process compute mode, taken, 1.0 GiB used"},
      {.what = "in use", .state = [](InventoryBuilder& inv) { Use(inv, CUDA, 0, 2, 3 * kGiB); }, .eligible = false,
       .taken = true,
       .why = "not picked: in use (2 processes, 3.0 GiB used, 77.0 GiB free of 80.0 GiB); allow_shared (--shared) "
              "would let it be shared"},
      {.what = "in use, shared", .state = [](InventoryBuilder& inv) { Use(inv, CUDA, 0, 2, 3 * kGiB); },
       .allow_shared = true,
       .eligible = true, .taken = false, .why = "2 processes"},
      {.what = "processes not listed count as none",
       .state = [](InventoryBuilder& inv) {
         Use(inv, CUDA, 0, 2, 0);
         inv.Device(CUDA, 0).mutable_usage()->set_processes_known(false);
       },
       .eligible = true, .taken = false, .why = "processes not reported by nvml"},
      {.what = "free memory unknown under min_free",
       .state = [](InventoryBuilder& inv) { inv.Device(CUDA, 0).clear_memory_free_bytes(); },
       .min_free = kGiB, .eligible = false, .taken = false,
       .why = "not picked: free memory unknown and --min_free (min_free_bytes) is 1.0 GiB"},
      {.what = "less free than min_free", .state = [](InventoryBuilder& inv) { Use(inv, CUDA, 0, 0, 70 * kGiB); },
       .min_free = 40 * kGiB, .eligible = false, .taken = false,
       .why = "not picked: 10.0 GiB free, less than --min_free (min_free_bytes) 40.0 GiB (no process, 70.0 GiB used"},
      {.what = "no usage read", .state = [](InventoryBuilder&) {}, .eligible = true, .taken = false,
       .why = "usage unknown (no vendor library read it), 80.0 GiB free of 80.0 GiB"},
      {.what = "a core's free memory is not reported",
       .state = [](InventoryBuilder& inv) { inv.Device(CUDA, 0).set_sub_device_count(2); },
       .min_free = kGiB, .sub_device = 1, .eligible = false, .taken = false, .why = "not picked: free memory unknown"},
      {.what = "a lease on a core holds only that core",
       .state = [](InventoryBuilder& inv) { inv.Device(CUDA, 0).set_sub_device_count(2); },
       .leased = {{CUDA, bus, 0, "", "x"}}, .sub_device = 1, .eligible = true, .taken = false, .why = "usage unknown"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    InventoryBuilder inv;
    inv.Add(CUDA, 2);
    c.state(inv);
    v1::PickDevicesRequest request;
    request.set_allow_shared(c.allow_shared);
    request.set_min_free_bytes(c.min_free);
    const Candidate got = Judge({&inv.Device(CUDA, 0), c.sub_device, nullptr}, 3, CUDA, request, 1, c.leased);
    EXPECT_EQ(got.eligible, c.eligible);
    EXPECT_EQ(got.taken, c.taken);
    EXPECT_THAT(got.why, StartsWith(c.why));
    EXPECT_EQ(got.job_index, 3);
    EXPECT_FALSE(got.picked);
  }
}

TEST(PickCandidates, JudgeReadsAMigInstancesOwnUsageAndRefusesItForMoreThanOne) {
  InventoryBuilder inv;
  inv.Add(CUDA, 1);
  v1::Partition& p = *inv.Device(CUDA, 0).add_partitions();
  p.set_uuid("MIG-1");
  p.mutable_usage()->set_source("nvml");
  p.mutable_usage()->set_processes_known(true);
  p.mutable_usage()->set_process_count(1);
  p.mutable_usage()->set_memory_used_bytes(2 * kGiB);
  Use(inv, CUDA, 0, 3, 9 * kGiB);  // the whole GPU's: not the instance's
  const VisibleUnit unit{&inv.Device(CUDA, 0), -1, &p};
  v1::PickDevicesRequest shared;
  shared.set_allow_shared(true);
  Candidate c = Judge(unit, 0, CUDA, shared, 1, {});
  EXPECT_TRUE(c.eligible);
  EXPECT_EQ(c.processes, 1u);
  EXPECT_EQ(c.used, 2 * kGiB);
  EXPECT_TRUE(c.free_unknown);
  c = Judge(unit, 0, CUDA, shared, 2, {});
  EXPECT_EQ(c.why, "not picked: a MIG instance, and a CUDA process sees only one (count > 1)");
  // A lease on the instance, or on its whole GPU, holds it; one on a sibling instance does not.
  EXPECT_EQ(Judge(unit, 0, CUDA, shared, 1, {{CUDA, inv.Device(CUDA, 0).pci_bus_id(), -1, "MIG-1", "x"}}).why,
            "not picked: leased (x)");
  EXPECT_EQ(Judge(unit, 0, CUDA, shared, 1, {{CUDA, inv.Device(CUDA, 0).pci_bus_id(), -1, "", "y"}}).why,
            "not picked: leased (y)");
  EXPECT_TRUE(Judge(unit, 0, CUDA, shared, 1, {{CUDA, inv.Device(CUDA, 0).pci_bus_id(), -1, "MIG-2", "z"}}).eligible);
}

// ---- step 2: the job's units ----

TEST(PickCandidates, ViewOfTheJobFollowsItsMasksDeviceNodesAndAllocation) {
  InventoryBuilder inv;
  inv.Add(CUDA, 4);
  const v1::Backend& backend = inv.Build().backends(1);
  v1::PickDevicesResponse out;
  const v1::ResolveDeviceRequest masked = Req::Train().Env("CUDA_VISIBLE_DEVICES", "3,1");
  absl::StatusOr<JobView> view = ViewOf(inv, backend, masked, out);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_THAT(Hosts(view->pool), ElementsAre(3, 1));  // the job's order
  EXPECT_EQ(view->job_devices, nullptr);
  EXPECT_EQ(view->alloc(), nullptr);
  EXPECT_THAT(Explained(out), HasSubstr("CUDA_VISIBLE_DEVICES"));

  const v1::ResolveDeviceRequest nodes = Req::Train().JobNodes({"/dev/nvidia2"});
  view = ViewOf(inv, backend, nodes, out);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_THAT(Hosts(view->pool), ElementsAre(2));
  EXPECT_EQ(view->job_devices, &nodes.job_devices());

  const v1::ResolveDeviceRequest dra = DraJob(0);
  view = ViewOf(inv, backend, dra, out);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_THAT(Hosts(view->pool), ElementsAre(0));
  ASSERT_NE(view->alloc(), nullptr);
  EXPECT_EQ(view->alloc()->devices.size(), 1u);

  // None left: the visibility's reason.
  const v1::ResolveDeviceRequest none = Req::Train().JobNodes({"/dev/nvidia9"});
  view = ViewOf(inv, backend, none, out);
  EXPECT_EQ(view.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(view.status().message()),
              StartsWith("P-PICK the job sees no cuda/nvidia device: NVIDIA GPU present but not visible to the job: "
                         "job_devices lists none of"));
  // The job's own mask error comes back as ComputeVisibility gives it.
  view = ViewOf(inv, backend, Req::Train().Env("CUDA_DEVICE_ORDER", "BOGUS"), out);
  EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PickCandidates, ViewOfAMigGpuOffersEachInstanceWithAUuidAndEachGpuWithoutMig) {
  InventoryBuilder inv;
  inv.Add(CUDA, 2);
  v1::Device& gpu = inv.Device(CUDA, 0);
  (*gpu.mutable_attributes())["mig_mode"] = "enabled";
  for (const char* uuid : {"MIG-a", "", "MIG-c"}) {
    v1::Partition& p = *gpu.add_partitions();
    p.set_uuid(uuid);
    p.set_gpu_instance_id(gpu.partitions_size());
  }
  v1::PickDevicesResponse out;
  const v1::ResolveDeviceRequest job = Req::Train();
  absl::StatusOr<JobView> view = ViewOf(inv, inv.Build().backends(1), job, out);
  ASSERT_TRUE(view.ok()) << view.status();
  std::vector<std::string> units;
  for (const VisibleUnit& u : view->pool) units.push_back(DescribeUnit(u));
  EXPECT_THAT(units, ElementsAre("host device 0 (0000:20:00.0) MIG MIG-a", "host device 0 (0000:20:00.0) MIG MIG-c",
                                 "host device 1 (0000:21:00.0)"));
  EXPECT_THAT(Explained(out), HasSubstr("P-PICK E-MIG: CUDA would choose the MIG instance itself; the pick chooses "
                                        "among 3 unit(s)"));
}

// ---- step 1: the row ----

TEST(PickRow, NamedOrTheJobsAnswersAndOnlyAnAcceleratorTheHostHas) {
  InventoryBuilder inv;
  inv.Add(CUDA, 2);
  v1::PickDevicesResponse out;
  absl::StatusOr<const v1::Backend*> row = PickRow(inv, v1::ROW_UNSPECIFIED, Req::Train(), out);
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ((*row)->row(), CUDA);
  EXPECT_EQ(out.backend(), CUDA);
  EXPECT_THAT(out.explanation(), ElementsAre("P-PICK the job's answer is cuda:0: picking from its row"));

  out.Clear();
  row = PickRow(inv, CUDA, Req::Train(), out);
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_THAT(out.explanation(), IsEmpty());  // named: the job's answer is not asked

  row = PickRow(inv, v1::ROW_NPU, Req::Train(), out);
  EXPECT_EQ(row.status().message(), "row: this host has no npu hardware (rows present: cpu, cuda/nvidia)");
  for (const v1::Row r : {v1::ROW_CPU, v1::ROW_MPS}) {
    row = PickRow(inv, r, Req::Train(), out);
    EXPECT_EQ(row.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(row.status().message(), HasSubstr("has no devices to pick"));
  }
  row = PickRow(inv, v1::ROW_UNSPECIFIED, Req::Train().UseCpu(), out);
  EXPECT_THAT(std::string(row.status().message()), StartsWith("P-PICK the job's device is cpu"));
  row = PickRow(inv, v1::ROW_UNSPECIFIED, Req::Train().Env("CUDA_DEVICE_ORDER", "BOGUS"), out);
  EXPECT_EQ(row.status().code(), absl::StatusCode::kInvalidArgument);
}

// Every accelerator row can be masked, by a variable of its own (backends.cc's mask_variables),
// and unsets only variables of its own.
TEST(PickRow, EveryAcceleratorRowHasAMaskFormOfItsOwnVariables) {
  for (const BackendSpec& spec : Backends()) {
    SCOPED_TRACE(spec.name);
    const std::optional<MaskForm> form = MaskFormOf(spec.row);
    if (spec.row == v1::ROW_CPU || spec.row == v1::ROW_MPS) {
      EXPECT_FALSE(form.has_value());
      continue;
    }
    ASSERT_TRUE(form.has_value());
    EXPECT_THAT(spec.mask_variables, ::testing::Contains(absl::string_view(form->variable)));
    for (const char* v : form->unset) EXPECT_THAT(spec.mask_variables, ::testing::Contains(absl::string_view(v)));
  }
}

// ---- step 5: the mask ----

TEST(PickMask, MaskForWritesUuidsOrIndicesOrModuleIdsAndUnsetsWhatWouldNarrowIt) {
  InventoryBuilder inv;
  inv.Add(CUDA, 3);
  const v1::Backend* backend = &inv.Build().backends(1);
  const std::vector<VisibleUnit> chosen = {{&backend->devices(2), -1, nullptr}, {&backend->devices(0), -1, nullptr}};
  const JobView view;
  v1::PickDevicesResponse out;
  const v1::ResolveDeviceRequest job = Req::Train().Env("CUDA_VISIBLE_DEVICES", "0,2");
  absl::StatusOr<PickMask> mask = MaskFor(chosen, *MaskFormOf(CUDA), *backend, job, view, out);
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_EQ(mask->value, TestUuid(CUDA, 2) + "," + TestUuid(CUDA, 0));
  EXPECT_EQ(mask->set.size(), 1u);
  EXPECT_EQ(mask->applied.at("CUDA_VISIBLE_DEVICES"), mask->value);
  EXPECT_THAT(out.unset(), IsEmpty());

  // One without a UUID: indices in PCI order, in the job's numbering without its mask.
  inv.Device(CUDA, 0).clear_uuid();
  backend = &inv.Build().backends(1);
  mask = MaskFor({{&backend->devices(2), -1, nullptr}, {&backend->devices(0), -1, nullptr}}, *MaskFormOf(CUDA),
                 *backend, job, view, out);
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_EQ(mask->value, "2,0");
  EXPECT_EQ(mask->set.at("CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
  EXPECT_EQ(mask->applied.at("CUDA_DEVICE_ORDER"), "PCI_BUS_ID");

  // AMD: ROCR_VISIBLE_DEVICES, and HIP_VISIBLE_DEVICES (set by the job) removed.
  InventoryBuilder amd;
  amd.Add(v1::ROW_CUDA_AMD, 3);
  const v1::Backend& amd_backend = amd.Build().backends(1);
  const v1::ResolveDeviceRequest hip = Req::Train().Env("HIP_VISIBLE_DEVICES", "1").Env("OTHER", "kept");
  mask = MaskFor({{&amd_backend.devices(1), -1, nullptr}}, *MaskFormOf(v1::ROW_CUDA_AMD), amd_backend, hip, view, out);
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_EQ(mask->value, "1");
  EXPECT_THAT(out.unset(), ElementsAre("HIP_VISIBLE_DEVICES"));
  EXPECT_FALSE(mask->applied.contains("HIP_VISIBLE_DEVICES"));
  EXPECT_EQ(mask->applied.at("OTHER"), "kept");

  // Gaudi: module ids, not positions.
  InventoryBuilder hpu;
  hpu.Add(v1::ROW_HPU, 2);
  (*hpu.Device(v1::ROW_HPU, 0).mutable_attributes())["module_id"] = "5";
  const v1::Backend& hpu_backend = hpu.Build().backends(1);
  mask = MaskFor({{&hpu_backend.devices(0), -1, nullptr}, {&hpu_backend.devices(1), -1, nullptr}},
                 *MaskFormOf(v1::ROW_HPU), hpu_backend, Req::Train(), view, out);
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_EQ(mask->value, "5,1");  // device 1 has no module_id: its minor
}

TEST(PickMask, CheckMaskRefusesAVariableThatShowsTheJobOtherUnits) {
  InventoryBuilder inv;
  inv.Add(CUDA, 2);
  const v1::Backend& backend = inv.Build().backends(1);
  const std::vector<VisibleUnit> chosen = {{&backend.devices(1), -1, nullptr}};
  const MaskForm form = *MaskFormOf(CUDA);
  const JobView view;
  PickMask mask;
  mask.value = "1";
  mask.applied["CUDA_VISIBLE_DEVICES"] = "1";
  EXPECT_TRUE(CheckMask(chosen, form, mask, backend, view).ok());
  mask.value = mask.applied["CUDA_VISIBLE_DEVICES"] = "0";
  EXPECT_EQ(CheckMask(chosen, form, mask, backend, view).message(),
            "P-PICK cannot hand the job host device 1 (0000:21:00.0) through CUDA_VISIBLE_DEVICES=0: the job would "
            "see host device 0 (0000:20:00.0)");
  mask.value = mask.applied["CUDA_VISIBLE_DEVICES"] = "";
  EXPECT_THAT(CheckMask(chosen, form, mask, backend, view).message(), HasSubstr("the job would see nothing"));
  mask.applied["CUDA_DEVICE_ORDER"] = "BOGUS";
  EXPECT_THAT(CheckMask(chosen, form, mask, backend, view).message(),
              HasSubstr("the job would see env.CUDA_DEVICE_ORDER='BOGUS'"));
}

// ---- steps 5 and 6: handed out, and the job's answer ----

TEST(PickMask, HandOutFillsTheAnswerAndAnswerWithResolvesTheJobInItsNewEnvironment) {
  InventoryBuilder inv;
  inv.Add(CUDA, 3);
  Use(inv, CUDA, 2, 0, kGiB);
  const v1::Backend& backend = inv.Build().backends(1);
  std::vector<Candidate> candidates(3);
  for (int i = 0; i < 3; ++i) {
    candidates[i].unit = {&backend.devices(i), -1, nullptr};
    candidates[i].usage_unknown = !backend.devices(i).has_usage();
  }
  candidates[1].picked = candidates[2].picked = true;
  const std::vector<VisibleUnit> chosen = Chosen(candidates);
  EXPECT_THAT(Hosts(chosen), ElementsAre(1, 2));
  const v1::ResolveDeviceRequest job = Req::Train().Env("HIP_VISIBLE_DEVICES", "0");
  v1::PickDevicesResponse out;
  out.add_unset("HIP_VISIBLE_DEVICES");
  PickMask mask;
  mask.value = "1,2";
  mask.set["CUDA_VISIBLE_DEVICES"] = "1,2";
  mask.applied = mask.set;
  HandOut(chosen, *MaskFormOf(CUDA), mask, backend, out);
  EXPECT_EQ(out.env().at("CUDA_VISIBLE_DEVICES"), "1,2");
  EXPECT_THAT(out.devices(), ElementsAre("cuda:0", "cuda:1"));
  ASSERT_EQ(out.placed_size(), 2);
  EXPECT_EQ(out.placed(1).host_index(), 2);
  EXPECT_EQ(out.placed(1).job_index(), 1);
  EXPECT_EQ(out.placed(1).memory_free_bytes(), 79 * kGiB);
  ASSERT_EQ(out.lease().devices_size(), 2);
  EXPECT_EQ(out.lease().devices(0).pci_bus_id(), "0000:21:00.0");
  EXPECT_EQ(out.lease().devices(0).row(), CUDA);
  EXPECT_EQ(Explained(out), "P-PICK the job gets CUDA_VISIBLE_DEVICES=1,2 (and unsets HIP_VISIBLE_DEVICES): it sees "
                            "cuda:0, cuda:1");

  ASSERT_TRUE(AnswerWith(inv, job, mask, candidates, out).ok());
  EXPECT_EQ(out.device(), "cuda:0");
  EXPECT_THAT(out.explanation(), ::testing::Contains("P-PICK with it the job's answer is cuda:0"));
  // Device 1's usage is unknown (no vendor library): said; device 0's too, but it was not picked.
  ASSERT_GE(out.warnings_size(), 1);
  EXPECT_THAT(out.warnings(0), StartsWith("P-PICK usage unknown for host device 1 (0000:21:00.0): no vendor library"));
  EXPECT_THAT(out.warnings(0), Not(HasSubstr("host device 0")));
  EXPECT_THAT(out.warnings(0), Not(HasSubstr("host device 2")));
  // The job's own error in its new environment is the pick's.
  PickMask bad = mask;
  bad.applied["CUDA_DEVICE_ORDER"] = "BOGUS";
  EXPECT_EQ(AnswerWith(inv, job, bad, candidates, out).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace devplace::testing
