// TLS end to end, with throwaway certificates made for this run
// (make_test_certs.sh, the openssl CLI: a CA, a certificate for localhost
// and 127.0.0.1, a client certificate, a stranger's CA and certificate, an
// expired one).
//
// - The coordinator's API with --tls_cert serves TLS clients that trust the
//   CA (also the `octet` CLI with --tls_ca), and no plaintext client or
//   client trusting another CA; --health_port answers health in plaintext
//   and nothing else.
// - With --tls_client_ca only clients with a certificate that CA signed are
//   served.
// - Remote workers on TCP with --tls_*: the coordinator reaches them (and
//   they its rendezvous store) over mutual TLS and serves; the group token
//   is refused in clear text by the workers and the store, as is TLS
//   without a certificate the CA signed; a coordinator without TLS reaches
//   no such worker.
// - A missing, unreadable, non-PEM, expired or mismatched file, or a
//   certificate without its key, ends coordinator, worker and `octet` with
//   exit code 2 and one line naming the flag.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "coordinator/worker_group.h"
#include "model/synthetic.h"
#include "octet/v1/generation.grpc.pb.h"
#include "rpc/store.h"
#include "tests/process_util.h"

namespace octet {
namespace {

namespace fs = std::filesystem;
namespace rpc = internal::v1;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        absl::StrCat("octet_tls_", ::getpid()));
    ASSERT_TRUE(
        WriteSyntheticCheckpoint(*SyntheticPreset("tiny"), {.seed = 3}, Model())
            .ok());
    const std::string make = absl::StrCat(OCTET_TEST_CERTS_SCRIPT, " ",
                                          Certs().string(), " >/dev/null");
    ASSERT_EQ(std::system(make.c_str()), 0) << make;
    std::ofstream(*dir_ / "token") << "tls-test-token\n";
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string Model() { return (*dir_ / "tiny").string(); }
  static fs::path Certs() { return *dir_ / "certs"; }
  static std::string Cert(const std::string& name) {
    return (Certs() / name).string();
  }
  static std::string Pem(const std::string& name) {
    return ReadAll(Certs() / name);
  }
  static std::string TokenFile() { return (*dir_ / "token").string(); }

  // A client of 127.0.0.1:`port`: TLS trusting `ca` (a file in the certs
  // folder; none: plaintext), presenting `cert` (none: no certificate).
  static std::shared_ptr<grpc::Channel> Channel(int port,
                                                const std::string& ca = "",
                                                const std::string& cert = "") {
    TlsConfig tls;
    if (!ca.empty()) tls.ca = Pem(ca);
    if (!cert.empty()) {
      tls.cert_chain = Pem(cert + ".pem");
      tls.private_key = Pem(cert + ".key");
    }
    return grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                               TlsChannelCredentials(tls));
  }

  // A coordinator on a fresh port with `flags` besides the usual ones.
  static std::unique_ptr<testing::Child> StartCoordinator(
      int port, const std::vector<std::string>& flags) {
    std::vector<std::string> command = {testing::SiblingProgram("coordinator"),
                                        "--model=" + Model(),
                                        "--quantization=fp8",
                                        "--device=cpu",
                                        absl::StrCat("--port=", port),
                                        "--kv_cache_tokens=512",
                                        "--block_size=8",
                                        "--threads=1"};
    command.insert(command.end(), flags.begin(), flags.end());
    return std::make_unique<testing::Child>(command);
  }

  // Whether GetModelInfo answers OK within 60 s (UNAVAILABLE while the
  // workers load) to a client like Channel(port, ca, cert)'s. A new channel
  // each time: one refused at first waits out its reconnect backoff.
  static bool Serves(int port, const std::string& ca,
                     const std::string& cert = "") {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(5));
      v1::ModelInfo info;
      if (v1::Generation::NewStub(Channel(port, ca, cert))
              ->GetModelInfo(&context, {}, &info)
              .ok()) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
    return false;
  }

  // One greedy request of 4 new tokens: its status (OK only with the 4).
  static grpc::Status Generate(const std::shared_ptr<grpc::Channel>& channel) {
    v1::GenerateRequest request;
    for (int32_t id : {1, 17, 33}) request.mutable_token_ids()->add_ids(id);
    request.mutable_stopping()->set_max_new_tokens(4);
    request.mutable_stopping()->set_ignore_eos(true);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(20));
    v1::GenerateResponse response;
    grpc::Status s = v1::Generation::NewStub(channel)->Generate(
        &context, request, &response);
    if (s.ok() && response.token_ids_size() != 4) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat(response.token_ids_size(), " tokens"));
    }
    return s;
  }

  // grpc.health.v1 Check of service "" on `channel`: OK and SERVING?
  static grpc::Status CheckServing(
      const std::shared_ptr<grpc::Channel>& channel) {
    grpc::GenericStub stub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    grpc::Slice empty("");  // HealthCheckRequest{}: service ""
    grpc::ByteBuffer request(&empty, 1), response;
    absl::Notification done;
    grpc::Status status;
    stub.UnaryCall(&context, "/grpc.health.v1.Health/Check",
                   grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    done.WaitForNotification();
    std::vector<grpc::Slice> slices;
    if (!status.ok() || !response.Dump(&slices).ok()) return status;
    std::string bytes;
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    if (bytes != std::string("\x08\x01", 2)) {  // status: SERVING
      return grpc::Status(grpc::StatusCode::INTERNAL, "not SERVING");
    }
    return status;
  }

  // Runs `command` to its end: its exit code, and its stderr in `err`.
  static int Run(const std::vector<std::string>& command, std::string* err) {
    const fs::path log = *dir_ / "run.err";
    std::vector<std::string> quoted;
    for (const std::string& a : command) quoted.push_back("'" + a + "'");
    const std::vector<int> codes =
        testing::RunTogether({{"/bin/sh", "-c",
                               absl::StrCat(absl::StrJoin(quoted, " "), " 2>",
                                            log.string(), " >/dev/null")}},
                             absl::Seconds(60));
    *err = ReadAll(log);
    return codes[0];
  }

  // `octet generate --server 127.0.0.1:PORT` with `flags`: its exit code
  // (0: the tokens came), and its stderr in `err`.
  static int Cli(int port, const std::vector<std::string>& flags,
                 std::string* err) {
    std::vector<std::string> command = {
        testing::SiblingProgram("octet"), "generate",
        absl::StrCat("--server=127.0.0.1:", port), "--prompt_ids=1,17,33",
        "--max_tokens=4"};
    command.insert(command.end(), flags.begin(), flags.end());
    return Run(command, err);
  }

  static fs::path* dir_;
};

fs::path* TlsTest::dir_ = nullptr;

TEST_F(TlsTest, TheApiServesTlsClientsOnlyAndHealthInPlaintext) {
  const int port = testing::FreeTcpPort();
  const int health_port = testing::FreeTcpPort();
  auto coordinator =
      StartCoordinator(port, {"--tls_cert=" + Cert("server.pem"),
                              "--tls_key=" + Cert("server.key"),
                              absl::StrCat("--health_port=", health_port)});
  ASSERT_TRUE(coordinator->started());
  const auto tls = Channel(port, "ca.pem");
  ASSERT_TRUE(Serves(port, "ca.pem")) << "no TLS answer within 60 s";
  EXPECT_TRUE(Generate(tls).ok()) << Generate(tls).error_message();
  // Plaintext, or TLS trusting another CA: no connection at all.
  EXPECT_EQ(Generate(Channel(port)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Generate(Channel(port, "rogue-ca.pem")).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // Health for probes that cannot do TLS, and nothing else, in plaintext.
  EXPECT_TRUE(CheckServing(Channel(health_port)).ok());
  EXPECT_EQ(Generate(Channel(health_port)).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  // The CLI: with --tls_ca it is served, without it refused.
  std::string err;
  EXPECT_EQ(Cli(port, {"--tls_ca=" + Cert("ca.pem")}, &err), 0) << err;
  EXPECT_NE(err.find("4 generated tokens"), std::string::npos) << err;
  EXPECT_EQ(Cli(port, {}, &err), 1) << err;
  EXPECT_EQ(Cli(port, {"--tls_ca=" + Cert("rogue-ca.pem")}, &err), 1) << err;
}

TEST_F(TlsTest, AClientCaAdmitsOnlyClientsWithACertificateItSigned) {
  const int port = testing::FreeTcpPort();
  auto coordinator =
      StartCoordinator(port, {"--tls_cert=" + Cert("server.pem"),
                              "--tls_key=" + Cert("server.key"),
                              "--tls_client_ca=" + Cert("ca.pem")});
  ASSERT_TRUE(coordinator->started());
  const auto with_cert = Channel(port, "ca.pem", "client");
  ASSERT_TRUE(Serves(port, "ca.pem", "client"))
      << "no mutual TLS answer within 60 s";
  EXPECT_TRUE(Generate(with_cert).ok());
  EXPECT_NE(Generate(Channel(port, "ca.pem")).error_code(),
            grpc::StatusCode::OK);  // no certificate
  EXPECT_NE(Generate(Channel(port, "ca.pem", "rogue")).error_code(),
            grpc::StatusCode::OK);  // a stranger's
  std::string err;
  EXPECT_EQ(
      Cli(port,
          {"--tls_ca=" + Cert("ca.pem"), "--tls_cert=" + Cert("client.pem"),
           "--tls_key=" + Cert("client.key")},
          &err),
      0)
      << err;
  EXPECT_EQ(Cli(port, {"--tls_ca=" + Cert("ca.pem")}, &err), 1) << err;
}

TEST_F(TlsTest, RemoteWorkersTakeTheTokenOnlyOverMutualTls) {
  std::vector<std::unique_ptr<testing::Child>> workers;
  std::vector<std::string> addresses;
  std::vector<int> ports;
  const int worker_health = testing::FreeTcpPort();
  for (int r = 0; r < 2; ++r) {
    ports.push_back(testing::FreeTcpPort());
    addresses.push_back(absl::StrCat("127.0.0.1:", ports.back()));
    std::vector<std::string> command = {
        testing::SiblingProgram("worker"), "--listen=" + addresses.back(),
        "--token_file=" + TokenFile(),     "--tls_cert=" + Cert("server.pem"),
        "--tls_key=" + Cert("server.key"), "--tls_ca=" + Cert("ca.pem")};
    if (r == 0)
      command.push_back(absl::StrCat("--health_port=", worker_health));
    workers.push_back(std::make_unique<testing::Child>(command));
    ASSERT_TRUE(workers.back()->started());
  }
  // A coordinator without TLS reaches no such worker (nothing loads).
  {
    WorkerGroupOptions plain;
    plain.tp = 2;
    plain.remote = addresses;
    plain.token = "tls-test-token";
    plain.rendezvous_listen = "0.0.0.0:0";
    plain.start_timeout = absl::Seconds(3);
    plain.load.set_model_dir(Model());
    auto group = WorkerGroup::Start(plain, nullptr);
    ASSERT_FALSE(group.ok());
    EXPECT_NE(group.status().message().find("plaintext"), std::string::npos)
        << group.status();
  }
  // The coordinator's certificate for the workers is its API's
  // (--tls_cert), and both links take TLS.
  const int port = testing::FreeTcpPort();
  const int store_port = testing::FreeTcpPort();
  auto coordinator = StartCoordinator(
      port,
      {"--tp=2", "--workers=" + absl::StrJoin(addresses, ","),
       "--token_file=" + TokenFile(),
       absl::StrCat("--rendezvous_port=", store_port),
       "--tls_cert=" + Cert("server.pem"), "--tls_key=" + Cert("server.key"),
       "--worker_tls_ca=" + Cert("ca.pem")});
  ASSERT_TRUE(coordinator->started());
  ASSERT_TRUE(Serves(port, "ca.pem")) << "not served within 60 s";
  EXPECT_TRUE(Generate(Channel(port, "ca.pem")).ok());

  // The worker protocol with the group's token: served over mutual TLS
  // only.
  auto worker_health_call = [&](const std::shared_ptr<grpc::Channel>& c) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    context.AddMetadata("authorization", "Bearer tls-test-token");
    rpc::HealthResponse response;
    return rpc::Worker::NewStub(c)->Health(&context, {}, &response);
  };
  EXPECT_TRUE(worker_health_call(Channel(ports[0], "ca.pem", "client")).ok());
  EXPECT_EQ(worker_health_call(Channel(ports[0])).error_code(),
            grpc::StatusCode::UNAVAILABLE);  // in clear text
  EXPECT_NE(worker_health_call(Channel(ports[0], "ca.pem")).error_code(),
            grpc::StatusCode::OK);  // TLS without a certificate
  EXPECT_NE(
      worker_health_call(Channel(ports[0], "ca.pem", "rogue")).error_code(),
      grpc::StatusCode::OK);  // a stranger's certificate
  EXPECT_TRUE(CheckServing(Channel(worker_health)).ok());

  // The rendezvous store, the same.
  TlsConfig client{Pem("client.pem"), Pem("client.key"), Pem("ca.pem")};
  const std::string store = absl::StrCat("127.0.0.1:", store_port);
  GrpcStore over_tls(store, "tls-test-token", client);
  ASSERT_TRUE(over_tls.Set("tls-test", "x").ok());
  auto value = over_tls.Get("tls-test", absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "x");
  GrpcStore in_clear(store, "tls-test-token");
  EXPECT_FALSE(in_clear.Get("tls-test", absl::Now() + absl::Seconds(2)).ok());
  TlsConfig anonymous{"", "", Pem("ca.pem")};
  GrpcStore no_cert(store, "tls-test-token", anonymous);
  EXPECT_FALSE(no_cert.Get("tls-test", absl::Now() + absl::Seconds(2)).ok());
}

TEST_F(TlsTest, BadTlsFlagsExitWithCodeTwoAndOneLineNamingTheFlag) {
  std::ofstream(*dir_ / "not-pem.txt") << "hello\n";
  const std::string text = (*dir_ / "not-pem.txt").string();
  const std::string missing = (*dir_ / "missing.pem").string();
  struct Case {
    std::string program;
    std::vector<std::string> flags;
    std::string says;  // the line must contain this
  };
  const std::string server = Cert("server.pem"), key = Cert("server.key");
  const std::string listen = "--listen=127.0.0.1:1";
  const std::string token = "--token_file=" + TokenFile();
  const std::vector<Case> cases = {
      {"coordinator", {"--tls_cert=" + server}, "--tls_cert needs --tls_key"},
      {"coordinator", {"--tls_key=" + key}, "--tls_key needs --tls_cert"},
      {"coordinator",
       {"--tls_cert=" + missing, "--tls_key=" + key},
       "--tls_cert " + missing + ": cannot read it"},
      {"coordinator",
       {"--tls_cert=" + text, "--tls_key=" + key},
       "--tls_cert " + text + ": holds no PEM certificate"},
      {"coordinator",
       {"--tls_cert=" + server, "--tls_key=" + text},
       "--tls_key " + text + ": holds no PEM private key"},
      {"coordinator",
       {"--tls_cert=" + server, "--tls_key=" + Cert("client.key")},
       "is not the key of --tls_cert"},
      {"coordinator",
       {"--tls_cert=" + Cert("expired.pem"),
        "--tls_key=" + Cert("expired.key")},
       "has expired"},
      {"coordinator",
       {"--tls_cert=" + Cert("client.pem"), "--tls_key=" + Cert("client.key")},
       "--tls_cert " + Cert("client.pem") +
           ": the certificate may not "
           "identify a TLS server"},
      {"coordinator",
       {"--tls_client_ca=" + Cert("ca.pem")},
       "--tls_client_ca needs --tls_cert"},
      {"coordinator",
       {"--tls_cert=" + server, "--tls_key=" + key, "--tls_client_ca=" + text},
       "--tls_client_ca " + text + ": holds no PEM certificate"},
      {"coordinator",
       {"--worker_tls_ca=" + Cert("ca.pem")},
       "--worker_tls_ca applies to --workers"},
      {"coordinator",
       {"--tp=2", "--workers=127.0.0.1:1,127.0.0.1:2", token,
        "--worker_tls_ca=" + Cert("ca.pem")},
       "--worker_tls_ca needs this coordinator's certificate"},
      {"coordinator",
       {"--tp=2", "--workers=127.0.0.1:1,127.0.0.1:2", token,
        "--worker_tls_ca=" + missing, "--worker_tls_cert=" + server,
        "--worker_tls_key=" + key},
       "--worker_tls_ca " + missing + ": cannot read it"},
      {"coordinator", {"--health_port=70000"}, "--health_port 70000"},
      {"worker",
       {listen, token, "--tls_cert=" + server, "--tls_key=" + key},
       "need --tls_ca"},
      {"worker",
       {listen, token, "--tls_cert=" + server, "--tls_key=" + missing,
        "--tls_ca=" + Cert("ca.pem")},
       "--tls_key " + missing + ": cannot read it"},
      {"worker",
       {listen, token, "--tls_cert=" + Cert("client.pem"),
        "--tls_key=" + Cert("client.key"), "--tls_ca=" + Cert("ca.pem")},
       "may not identify a TLS server"},
      {"worker",
       {"--listen=unix:/tmp/x.sock", "--tls_ca=" + Cert("ca.pem")},
       "apply to a TCP --listen"},
      {"octet",
       {"generate", "--server=127.0.0.1:1", "--prompt_ids=1",
        "--tls_ca=" + text},
       "--tls_ca " + text + ": holds no PEM certificate"},
      {"octet",
       {"generate", "--server=127.0.0.1:1", "--prompt_ids=1",
        "--tls_ca=" + Cert("ca.pem"), "--tls_cert=" + Cert("client.pem")},
       "--tls_cert needs --tls_key"},
      {"octet",
       {"generate", "--server=127.0.0.1:1", "--prompt_ids=1",
        "--tls_cert=" + Cert("client.pem"), "--tls_key=" + Cert("client.key")},
       "need --tls_ca"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> command = {testing::SiblingProgram(c.program)};
    if (c.program == "coordinator") command.push_back("--model=" + Model());
    command.insert(command.end(), c.flags.begin(), c.flags.end());
    std::string err;
    const std::string what = absl::StrJoin(command, " ");
    EXPECT_EQ(Run(command, &err), 2) << what << "\n" << err;
    EXPECT_NE(err.find(c.says), std::string::npos) << what << "\n" << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << what << "\n"
                                                           << err;
  }
}

}  // namespace
}  // namespace octet
