// Controls for the `tsan` preset (docs/DEVELOPING.md "When to run what"), built in every build.
//
// LockedWritesAreClean: two threads write one counter, each under an absl::Mutex. Clean under
// TSan only when TSan sees abseil's locks (abseil built with -fsanitize=thread, scripts/tsan_deps);
// with Debian's uninstrumented libabsl it reports a data race that is not there.
//
// DISABLED_UnlockedWriteRaces: the same with one writer skipping the lock, a real race. Disabled by
// default; ctest `tsan.catches_a_race` (tsan builds only) runs it with
// --gtest_also_run_disabled_tests and passes only when TSan reports the race.
//
// ProtobufMapOnArena: a message with a map field made and destroyed on an arena, as the daemon's
// answers are. Under TSan, protobuf's headers give MapFieldBase extra members, so with Debian's
// uninstrumented libprotobuf this crashes in MapFieldBase::Destruct; it passes when libprotobuf
// is built with TSan too (scripts/tsan_deps).
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "devplace/v1/devplace.pb.h"
#include "google/protobuf/arena.h"
#include "gtest/gtest.h"

namespace devplace {
namespace {

struct Counter {
  absl::Mutex mu;
  int value ABSL_GUARDED_BY(mu) = 0;

  void Add() {
    absl::MutexLock lock(&mu);
    ++value;
  }
  // Deliberately racy (the control): writes without the lock.
  void AddUnlocked() ABSL_NO_THREAD_SAFETY_ANALYSIS { ++value; }
  int Get() {
    absl::MutexLock lock(&mu);
    return value;
  }
};

constexpr int kRounds = 10000;

TEST(TsanControl, LockedWritesAreClean) {
  Counter c;
  std::thread a([&] { for (int i = 0; i < kRounds; ++i) c.Add(); });
  std::thread b([&] { for (int i = 0; i < kRounds; ++i) c.Add(); });
  a.join();
  b.join();
  EXPECT_EQ(c.Get(), 2 * kRounds);
}

TEST(TsanControl, DISABLED_UnlockedWriteRaces) {
  Counter c;
  std::thread a([&] { for (int i = 0; i < kRounds; ++i) c.Add(); });
  std::thread b([&] { for (int i = 0; i < kRounds; ++i) c.AddUnlocked(); });
  a.join();
  b.join();
  EXPECT_LE(c.Get(), 2 * kRounds);  // lost updates possible: that is the race
}

TEST(TsanControl, ProtobufMapOnArena) {
  for (int i = 0; i < 3; ++i) {
    google::protobuf::Arena arena;
    auto* answer = google::protobuf::Arena::CreateMessage<v1::PickDevicesResponse>(&arena);
    (*answer->mutable_env())["CUDA_VISIBLE_DEVICES"] = "0,1";
    v1::PickDevicesResponse copy;
    ASSERT_TRUE(copy.ParseFromString(answer->SerializeAsString()));
    EXPECT_EQ(copy.env().at("CUDA_VISIBLE_DEVICES"), "0,1");
  }
}

}  // namespace
}  // namespace devplace
