// devplaced's log lines (server/logging): key=value fields, the JSON line, the text quoting, the
// per-source rate limiter and the flag parsers.
#include "server/logging/logging.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace devplace::logging {
namespace {

using ::testing::HasSubstr;

TEST(ParseFields, KeyValuesQuotedValuesAndTrailingText) {
  const std::vector<Field> fields =
      ParseFields(R"(event=probe result=error code=INTERNAL error="probe \"x\" exited 2" rest of it)");
  ASSERT_EQ(fields.size(), 5u);
  EXPECT_EQ(fields[0].key, "event");
  EXPECT_EQ(fields[0].value, "probe");
  EXPECT_EQ(fields[3].key, "error");
  EXPECT_EQ(fields[3].value, "probe \"x\" exited 2");
  EXPECT_TRUE(fields[3].quoted);
  EXPECT_EQ(fields[4].key, "msg");
  EXPECT_EQ(fields[4].value, "rest of it");
}

TEST(JsonLine, OneObjectWithTheEventsFields) {
  EXPECT_EQ(JsonLine(absl::FromUnixMillis(1764525600123), "info",
                     R"(event=probe result=ok duration_ms=61 revision=1 version=2.1 mode=0660 error="a \"b\"")"),
            R"({"time":"2025-11-30T18:00:00.123Z","level":"info","event":"probe","result":"ok","duration_ms":61,)"
            R"("revision":1,"version":2.1,"mode":"0660","error":"a \"b\""})");
}

TEST(JsonLine, ControlCharactersAreEscaped) {
  EXPECT_THAT(JsonLine(absl::UnixEpoch(), "error", "event=x message=\"line1\nline2\x01\""),
              HasSubstr(R"("message":"line1\nline2\u0001")"));
}

TEST(Quote, KeepsALineOneLine) {
  EXPECT_EQ(Quote("a \"b\" \\ c\nd\x02"), R"("a \"b\" \\ c\nd\x02")");
}

TEST(RateLimiter, AllowsNPerSecondThenCountsTheRest) {
  RateLimiter limiter(2);
  const absl::Time t0 = absl::FromUnixSeconds(100);
  uint64_t suppressed = 99;
  EXPECT_TRUE(limiter.Allow(t0, &suppressed));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_TRUE(limiter.Allow(t0 + absl::Milliseconds(10), &suppressed));
  EXPECT_FALSE(limiter.Allow(t0 + absl::Milliseconds(20), &suppressed));
  EXPECT_FALSE(limiter.Allow(t0 + absl::Milliseconds(999), &suppressed));
  EXPECT_TRUE(limiter.Allow(t0 + absl::Seconds(1), &suppressed));
  EXPECT_EQ(suppressed, 2u);  // reported once, with the next line written
  EXPECT_TRUE(limiter.Allow(t0 + absl::Seconds(1), &suppressed));
  EXPECT_EQ(suppressed, 0u);
}

TEST(Flags, LevelAndFormatAcceptTheDocumentedValues) {
  EXPECT_EQ(*ParseLevel("debug"), spdlog::level::debug);
  EXPECT_EQ(*ParseLevel("warn"), spdlog::level::warn);
  EXPECT_EQ(*ParseLevel("error"), spdlog::level::err);
  EXPECT_EQ(*ParseFormat("json"), Format::kJson);
  EXPECT_EQ(ParseLevel("verbose").status().message(), "--log_level='verbose' is not one of debug, info, warn, error");
  EXPECT_EQ(ParseFormat("xml").status().message(), "--log_format='xml' is not one of text, json");
}

}  // namespace
}  // namespace devplace::logging
