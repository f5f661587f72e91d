// frostd: the frost gRPC server.
//
// `frostd --help` lists the flags (frostd_command below: one table parses them and prints the help).
// Flags override the config file (configs/default.yaml documents every field); without
// --config the built-in defaults apply (models/stories260K on 0.0.0.0:50051). The gRPC and metrics ports are
// bound
//  before the model loads (liveness answers at once, readiness once the model is warm) and logged;
//  --port-file also writes them, as "grpc=PORT\nmetrics=PORT\n" (and "http=PORT\n" with the OpenAI API on),
//  with an atomic rename, for scripts and tests
//  that start frostd on port 0.
//
// SIGHUP: re-read server.tls's certificate files (server/tls.h).
// SIGTERM / SIGINT: drain (see server/frost_server.h), then exit 0. Exit 1 when the config, the listeners or
// the model fail; 2 for usage errors. The stop signals are handled from the first instruction on: during
// start-up (config, listeners, state directory) one ends the process at once (exit 0: nothing was served);
// during the model load it stops the load from being followed by serving, and if the load has not returned
// server.drain_timeout_s later (or a second signal comes) the process exits without waiting for it.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/common/clock.h"
#include "core/common/log.h"
#include "core/flags/flags.h"
#include "server/config_overrides.h"
#include "server/frost_server.h"
#include "server/proto_codec.h"
#include "server/server_config.h"

namespace {

[[noreturn]] void fail(const std::string& msg) {
  FROST_LOG_ERROR("frostd: %s", msg.c_str());
  std::exit(1);
}

struct Flags {
  std::string config, port_file;
  // Config field overrides in command-line order: the flag, the field's path, the value. Each is read through
  // the config's own field table (set_server_config_field, server/server_config.h), after --config.
  struct Override {
    std::string flag, path, value;
  };
  std::vector<Override> overrides;
  double load_delay_s = 0;
};

// frostd's flags: the one table that parses them and prints --help (core/flags/flags.h).
frost::cli::Command frostd_command(Flags* f) {
  using frost::cli::string_flag;
  auto set = [](std::string* dst) { return [dst](const std::string& v) { *dst = v; }; };
  // A flag that overrides one config field; an empty value is no override (except where "" means off).
  auto field = [f](const std::string& flag, const std::string& path, bool empty_is_value = false) {
    return [f, flag, path, empty_is_value](const std::string& v) {
      if (!v.empty() || empty_is_value) f->overrides.push_back({flag, path, v});
    };
  };
  frost::cli::Command c;
  c.name = "frostd";
  c.synopsis = "[flags]";
  c.description =
      "The frost gRPC server. Flags override the config file; without --config the built-in defaults apply "
      "(models/stories260K on 0.0.0.0:50051). SIGTERM / SIGINT drain and exit 0; SIGHUP re-reads "
      "server.tls's certificate files.";
  c.flag_groups = {
      {"flags",
       {string_flag("--config", set(&f->config))
            .doc("FILE", "YAML config (configs/default.yaml documents every field)"),
        string_flag("--listen", field("--listen", "server.listen"))
            .doc("HOST:PORT", "gRPC address, overrides server.listen (port 0: pick a free port)"),
        string_flag("--model", field("--model", "model.path"))
            .doc(
                "PATH",
                "Hugging Face directory or builtin:tiny|builtin:tiny-gpt2|builtin:15m, overrides model.path"),
        string_flag("--device", field("--device", "model.device"))
            .doc("DEVICE",
                 "where the steps run: cpu, cuda, cuda:N or reference (the host reference device), overrides "
                 "model.device"),
        string_flag("--metrics-listen", field("--metrics-listen", "server.metrics_listen"))
            .doc("HOST:PORT", "Prometheus /metrics address, overrides server.metrics_listen"),
        string_flag("--http-listen", field("--http-listen", "server.http.listen", true))
            .doc(
                "HOST:PORT",
                "the OpenAI-compatible HTTP API's address, overrides server.http.listen (port 0: pick a free "
                "port; \"\": off)"),
        string_flag("--port-file", set(&f->port_file))
            .doc("FILE",
                 "write the bound ports (grpc=PORT, metrics=PORT, http=PORT, kv_events=PORT, "
                 "kv_events_replay=PORT) once listening"),
        string_flag("--log-level", field("--log-level", "log.level"))
            .doc("LEVEL", "debug|info|warn|error, overrides log.level"),
        string_flag("--state-dir", field("--state-dir", "jobs.state_dir"))
            .doc("DIR", "overrides jobs.state_dir (journal, checkpoints, artifacts)"),
        frost::cli::value_flag("--set",
                               [f](const std::string& kv) -> absl::Status {
                                 const size_t eq = kv.find('=');
                                 if (eq == std::string::npos || eq == 0)
                                   return frost::cli::bad_value("--set", "KEY=VALUE", kv);
                                 f->overrides.push_back({"--set", kv.substr(0, eq), kv.substr(eq + 1)});
                                 return absl::OkStatus();
                               })
            .doc("KEY=VALUE",
                 "sets any config field, e.g. engine.max_running=8 (repeatable; configs/default.yaml "
                 "documents the keys; the value is read as a plain YAML scalar, with the same checks)"),
        frost::cli::value_flag("--load-delay-s", [f](const std::string& v) -> absl::Status {
          double d = 0;
          if (!absl::SimpleAtod(v, &d) || !(d >= 0 && d <= 3600))
            return frost::cli::bad_value("--load-delay-s", "seconds in [0, 3600]", v);
          f->load_delay_s = d;
          return absl::OkStatus();
        }).doc("SECONDS", "wait this long before loading the model (for testing readiness probes)")}}};
  c.footer = "Exit 0 after a drain, 1 when the config, the listeners or the model fail, 2 for usage errors.";
  return c;
}

// A usage error found after parsing (a bad --log-level): the message and the help on stderr, exit 2.
[[noreturn]] void usage_error(const std::string& msg) {
  Flags scratch;
  frost::cli::exit_usage_error(frostd_command(&scratch), msg, 2);
}

Flags parse_flags(int argc, char** argv) {
  Flags f;
  const frost::cli::Command command = frostd_command(&f);
  const std::vector<std::string> positional =
      frost::cli::parse_or_exit(command, std::vector<std::string>(argv + 1, argv + argc), 2);
  if (!positional.empty()) usage_error(absl::StrCat("unexpected argument \"", positional.front(), "\""));
  return f;
}

bool write_port_file(const std::string& path, const frost::server::FrostServer& s) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "grpc=" << s.grpc_port() << "\nmetrics=" << s.metrics_port() << "\n";
    if (s.http_port() > 0) out << "http=" << s.http_port() << "\n";
    if (s.kv_events_port() > 0) out << "kv_events=" << s.kv_events_port() << "\n";
    if (s.kv_events_replay_port() > 0) out << "kv_events_replay=" << s.kv_events_replay_port() << "\n";
    if (!out.good()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

// How to call frostctl in the "ready" hint: in a build tree it sits in client/ next to server/ (so `make run`
// prints a line that works as pasted); elsewhere it is expected on PATH.
std::string frostctl_command() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "frostctl";
  const fs::path sibling = (exe.parent_path() / ".." / "client" / "frostctl").lexically_normal();
  if (!fs::exists(sibling, ec)) return "frostctl";
  const fs::path rel = fs::relative(sibling, fs::current_path(ec), ec);
  return ec || rel.empty() ? sibling.string() : rel.string();
}

int main(int argc, char** argv) {
  using frost::server::ServerConfig;
#if defined(__x86_64__) && defined(__AVX2__)
  // Built for the x86-64-v3 baseline (cmake/frost_flags.cmake): say so instead of dying of SIGILL later.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "frostd: this build needs an x86-64-v3 CPU (AVX2 and FMA); this CPU lacks them\n");
    return 1;
  }
#endif
  // Debian builds Abseil without NDEBUG, which leaves absl::Mutex's lock-order (deadlock) detection on: every
  // Lock and Unlock then takes a global spinlock and a hash lookup (GraphCycles), 0.4% of frostd's CPU at 32
  // streams, on the engine's and the delivery thread's hot locks. A debugging aid, not a serving one: off
  // here (the tests keep it).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Block the stop signals in every thread (gRPC's and LibTorch's threads inherit the mask); one thread below
  // receives them with sigwait().
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);  // re-read server.tls's certificate files
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  frost::server::route_protobuf_logs();

  // The signal thread, running before anything that could block (a config file on a hung mount, a listener,
  // the model load), so that a stop signal is never left pending in a process that does not answer it.
  enum Phase : int { kStarting, kLoading, kServing };
  std::atomic<int> phase{kStarting};
  std::atomic<frost::server::FrostServer*> srv{nullptr};
  std::atomic<int64_t> load_stop_deadline_ns{0};
  std::atomic<double> drain_timeout_s{30};
  absl::Notification stop;
  std::thread signal_thread([&stop_signals, &stop, &srv, &phase, &load_stop_deadline_ns, &drain_timeout_s] {
    const auto exit_now = [](const char* why) {
      FROST_LOG_WARN("frostd: %s: exiting", why);
      std::fflush(stderr);
      std::_Exit(0);
    };
    for (;;) {
      timespec tick{0, 100 * 1000 * 1000};
      siginfo_t info{};
      const int sig = sigtimedwait(&stop_signals, &info, &tick);
      const int ph = phase.load();
      if (sig < 0) {  // a tick (or EINTR)
        const int64_t deadline = load_stop_deadline_ns.load();
        if (ph == kLoading && deadline != 0 && frost::RealClock::get().now_ns() > deadline)
          exit_now("the model load did not return within server.drain_timeout_s of the stop signal");
        if (ph == kServing && stop.HasBeenNotified()) return;  // stopped during the load: main drains
        continue;
      }
      if (sig == SIGHUP) {
        frost::server::FrostServer* s = srv.load();
        if (s == nullptr) {
          FROST_LOG_INFO(
              "frostd: SIGHUP during start-up ignored (the certificate files are read as it starts)");
          continue;
        }
        FROST_LOG_INFO("frostd: SIGHUP received, re-reading the TLS certificate files");
        s->reload_tls();
        continue;
      }
      const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
      if (ph == kStarting) exit_now(absl::StrCat(name, " during start-up").c_str());
      if (ph == kLoading) {
        if (stop.HasBeenNotified())
          exit_now(absl::StrCat("a second ", name, " during the model load").c_str());
        FROST_LOG_INFO("frostd: %s received while the model loads: stopping once it returns", name);
        const double grace = drain_timeout_s.load();
        load_stop_deadline_ns.store(frost::RealClock::get().now_ns() + static_cast<int64_t>(grace * 1e9));
        stop.Notify();
        continue;
      }
      FROST_LOG_INFO("frostd: %s received, draining", name);
      stop.Notify();
      return;
    }
  });

  const Flags flags = parse_flags(argc, argv);
  ServerConfig cfg;
  if (!flags.config.empty()) {
    absl::StatusOr<ServerConfig> loaded = frost::server::load_server_config(flags.config);
    if (!loaded.ok()) fail(std::string(loaded.status().message()));
    cfg = *loaded;
  }
  for (const Flags::Override& o : flags.overrides) {
    if (absl::Status st = frost::server::set_server_config_field(&cfg, o.path, o.value); !st.ok())
      usage_error(absl::StrCat(o.flag, ": ", st.message()));
  }
  if (absl::Status st = frost::server::validate_server_config(cfg); !st.ok()) fail(std::string(st.message()));
  frost::set_log_level(cfg.log.level);
  FROST_LOG_DEBUG("frostd: config\n%s", frost::server::format_server_config(cfg).c_str());

  absl::StatusOr<std::unique_ptr<frost::server::FrostServer>> server = frost::server::FrostServer::start(cfg);
  if (!server.ok()) fail(std::string(server.status().message()));
  drain_timeout_s.store(cfg.server.drain_timeout_s);
  srv.store(server->get());
  phase.store(kLoading);
  if (!flags.port_file.empty() && !write_port_file(flags.port_file, **server)) {
    fail(absl::StrCat("--port-file: cannot write \"", flags.port_file, "\""));
  }

  // The model loads while liveness already answers; a stop signal during the (testing) delay skips the load.
  if (flags.load_delay_s > 0) stop.WaitForNotificationWithTimeout(absl::Seconds(flags.load_delay_s));
  if (!stop.HasBeenNotified()) {
    if (absl::Status st = (*server)->load_model(); !st.ok()) {
      (*server)->drain(0);
      fail(std::string(st.message()));
    }
  }
  phase.store(kServing);
  if (!stop.HasBeenNotified()) {
    std::fprintf(stderr,
                 "frostd: ready. Try:\n  %s --addr 127.0.0.1:%d generate "
                 "--prompt \"Once upon a time\" --max-tokens 32\n",
                 frostctl_command().c_str(), (*server)->grpc_port());
    if ((*server)->http_port() > 0) {
      std::fprintf(stderr,
                   "  curl -s http://127.0.0.1:%d/v1/completions -H 'Content-Type: application/json' "
                   "-d '{\"model\": \"%s\", \"prompt\": \"Once upon a time\", \"max_tokens\": 32}'\n",
                   (*server)->http_port(), (*server)->model_name().c_str());
    }
  }

  stop.WaitForNotification();
  (*server)->drain(cfg.server.drain_timeout_s);
  const int64_t t_release = frost::RealClock::get().now_ns();
  server->reset();  // the /metrics endpoint, the engine and the model
  FROST_LOG_DEBUG("frostd: released everything in %.2fs",
                  static_cast<double>(frost::RealClock::get().now_ns() - t_release) * 1e-9);
  // The signal thread has returned (it notified `stop`).
  signal_thread.join();
  return 0;
}
