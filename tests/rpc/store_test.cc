// The rendezvous store: in memory and over gRPC — values round-trip, a Get
// waits for a later Set, and a key that never comes is a DeadlineExceeded
// naming it, on time.
#include "rpc/store.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace octet {
namespace {

void ExpectWaitsAndTimesOut(KeyValueStore& store) {
  ASSERT_TRUE(store.Set("a", std::string("x\0y", 3)).ok());
  auto a = store.Get("a", absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, std::string("x\0y", 3));  // bytes, not C strings

  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_TRUE(store.Set("b", "late").ok());
  });
  auto b = store.Get("b", absl::Now() + absl::Seconds(10));
  later.join();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, "late");

  const absl::Time start = absl::Now();
  auto never = store.Get("never", start + absl::Milliseconds(400));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(never.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(never.status().message().find("never"), std::string::npos)
      << never.status();
  EXPECT_GE(took, absl::Milliseconds(350));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(Store, InMemory) {
  InMemoryStore store;
  ExpectWaitsAndTimesOut(store);
}

TEST(Store, OverGrpc) {
  InMemoryStore backing;
  auto server = RendezvousServer::Start("127.0.0.1:0", &backing);
  ASSERT_TRUE(server.ok()) << server.status();
  GrpcStore client((*server)->address());
  ExpectWaitsAndTimesOut(client);
  // The server's store holds what the client set.
  EXPECT_EQ(*backing.Get("b", absl::Now()), "late");
}

TEST(Store, AServerWithATokenServesOnlyCallsThatCarryIt) {
  InMemoryStore backing;
  auto server = RendezvousServer::Start("127.0.0.1:0", &backing, "s3cret");
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Time soon = absl::Now() + absl::Seconds(5);
  for (const std::string& token :
       {std::string(""), std::string("s3creT"), std::string("s3cret ")}) {
    GrpcStore stranger((*server)->address(), token);
    EXPECT_EQ(stranger.Set("k", "forged").code(),
              absl::StatusCode::kUnauthenticated)
        << "token '" << token << "'";
    EXPECT_EQ(stranger.Get("k", soon).status().code(),
              absl::StatusCode::kUnauthenticated);
  }
  EXPECT_EQ(backing.Get("k", absl::Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);  // nothing was written
  GrpcStore member((*server)->address(), "s3cret");
  ASSERT_TRUE(member.Set("k", "v").ok());
  EXPECT_EQ(*member.Get("k", soon), "v");
}

// Keys, values and the whole store are bounded: a local process cannot fill
// the coordinator's memory through it (it once took 150 MB in half a
// second).
TEST(Store, KeysValuesAndTheTotalAreBounded) {
  InMemoryStore backing;
  auto server = RendezvousServer::Start("127.0.0.1:0", &backing);
  ASSERT_TRUE(server.ok()) << server.status();
  GrpcStore client((*server)->address());
  EXPECT_TRUE(client.Set(std::string(512, 'k'), "v").ok());
  EXPECT_EQ(client.Set(std::string(513, 'k'), "v").code(),
            absl::StatusCode::kInvalidArgument);
  const std::string big(64 << 10, 'v');
  EXPECT_TRUE(client.Set("big", big).ok());
  EXPECT_EQ(client.Set("bigger", big + "v").code(),
            absl::StatusCode::kInvalidArgument);
  // Replacing a value does not count it twice...
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(client.Set("big", big).ok());
  // ...but 16 MiB in all is the end.
  absl::Status s;
  int stored = 0;
  for (; stored < 300 && s.ok(); ++stored) {
    s = client.Set(absl::StrCat("key", stored), big);
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_GE(stored, 250);  // 16 MiB / 64 KiB = 256 values
  EXPECT_EQ(
      backing.Get(absl::StrCat("key", stored - 1), absl::Now()).status().code(),
      absl::StatusCode::kDeadlineExceeded);    // the refused one
  EXPECT_TRUE(client.Set("small", "v").ok());  // room for what fits
}

TEST(Store, ClientWaitsForAServerThatIsNotUpYet) {
  // Find a free port, then start the server there only after the client
  // has begun waiting.
  InMemoryStore backing;
  std::string address;
  {
    auto probe = RendezvousServer::Start("127.0.0.1:0", &backing);
    ASSERT_TRUE(probe.ok());
    address = (*probe)->address();
  }
  std::unique_ptr<RendezvousServer> server;
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(500));
    ASSERT_TRUE(backing.Set("k", "v").ok());
    auto s = RendezvousServer::Start(address, &backing);
    ASSERT_TRUE(s.ok()) << s.status();
    server = *std::move(s);
  });
  GrpcStore client(address);
  auto v = client.Get("k", absl::Now() + absl::Seconds(20));
  starter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "v");
}

TEST(Store, BadAddressIsAnError) {
  InMemoryStore backing;
  EXPECT_EQ(RendezvousServer::Start("no-port", &backing).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octet
