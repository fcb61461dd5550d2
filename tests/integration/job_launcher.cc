// A job's launcher, for the JobLease tests (job_lease_test.cc): picks one device with libdevplace's
// Client::Pick and its default holder (the job: JobLeaseHolder), sets the pick's environment, starts
// two workers that each run until their FIFO (argv[1], argv[2]) is written to and closed (`cat
// FIFO`, output discarded), prints one line
//   holder=<LeaseHolder name> lease_pid=N pid=N workers=A,B cvd=<CUDA_VISIBLE_DEVICES> warnings=N
// and waits until its stdin ends. The daemon comes from DEVPLACE_ADDRESS. Exit status 1 when the pick
// fails (its status on stderr), 2 on a usage error.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "devplace/client.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: job_launcher FIFO1 FIFO2\n");
    return 2;
  }
  absl::StatusOr<devplace::Client> client = devplace::Client::Connect();
  if (!client.ok()) {
    std::fprintf(stderr, "job_launcher: %s\n", client.status().ToString().c_str());
    return 1;
  }
  devplace::PickOptions options;
  // The job's environment says nothing of its devices here (as Python's devplace.for_job({})).
  options.job = devplace::ResolveOptions::ForJob(devplace::v1::WORKLOAD_TRAINING, {}, std::nullopt);
  absl::StatusOr<devplace::v1::PickDevicesResponse> picked = client->Pick(options);
  if (!picked.ok()) {
    std::fprintf(stderr, "job_launcher: %s\n", picked.status().ToString().c_str());
    return 1;
  }
  devplace::ApplyPickEnvironment(*picked);
  for (const std::string& warning : picked->warnings()) std::fprintf(stderr, "job_launcher: warning: %s\n", warning.c_str());
  pid_t workers[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    workers[i] = fork();
    if (workers[i] == 0) {
      const int devnull = open("/dev/null", O_WRONLY);
      if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
      execlp("cat", "cat", argv[1 + i], static_cast<char*>(nullptr));
      _exit(127);
    }
    if (workers[i] < 0) {
      std::perror("job_launcher: fork");
      return 1;
    }
  }
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  std::printf("holder=%s lease_pid=%u pid=%d workers=%d,%d cvd=%s warnings=%d\n",
              devplace::v1::LeaseHolder_Name(picked->lease().holder()).c_str(), picked->lease().pid(),
              static_cast<int>(getpid()), static_cast<int>(workers[0]), static_cast<int>(workers[1]),
              cvd != nullptr ? cvd : "", picked->warnings_size());
  std::fflush(stdout);
  char buffer[256];
  while (read(STDIN_FILENO, buffer, sizeof buffer) > 0) {
  }
  return 0;
}
