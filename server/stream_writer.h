#pragma once
// CoalescingStream<Msg>: the one write state machine of frostd's server-streaming reactors (Health.Watch,
// Training.WatchJob, Generation.Generate). Messages wait in a queue while a write is in flight; new ones are
// coalesced into it, never block the thread that produces them, and go out one write at a time.
//
//   enqueue(f)       f(queue) under the lock: add a message or merge into the last one not yet started
//                    (Generate: tokens join the last queued chunk, nothing is dropped). Ignored once broken.
//   post(msg, last)  the latest-state form (Health.Watch, WatchJob): the queue becomes {msg}, replacing a
//                    message not yet started; `last`: the call finishes OK after it, and later posts are
//                    ignored. A post whose `version` is below the newest post's is dropped, so an older state
//                    never follows a newer one.
//   close(st, last)  the outcome: the call finishes with `st` once everything queued (then `last`, if any) is
//                    written. With finish_with_last_write, `last` goes out with the status in one
//                    StartWriteAndFinish.
//   abort(st)        drops what is queued and finishes with `st` as soon as no write is in flight.
//   broken           a failed write (the client went away) or a message that cannot be serialized: the
//                    queue is dropped and on_broken(why) runs; the default aborts with `why`, a subclass may
//                    instead wait for its producer's close() (Generate waits for the engine's outcome). A
//                    status that could not be serialized replaces the outcome's.
//
// gRPC calls (StartWrite, Finish) are made outside the mutex, and a write and Finish never overlap: Finish
// waits for the write in flight. Nothing here touches the object after Finish(): OnDone may release it at
// once. OnCancel and OnDone are the subclass's (ownership differs: hold()/release() here, or the subclass's
// own). Subclasses may guard their own fields with mu_ (taken after any lock of theirs; never held across
// gRPC calls).
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/common/clock.h"
#include "server/proto_codec.h"
#include "server/status_convert.h"

namespace frost::server {

template <class Msg>
class CoalescingStream : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // `gone_msg`: the CANCELLED message when a write fails. `finish_with_last_write`: see close().
  explicit CoalescingStream(std::string gone_msg, bool finish_with_last_write = false)
      : gone_msg_(std::move(gone_msg)), finish_with_last_write_(finish_with_last_write) {}

  template <class F>
  void enqueue(F&& f) {
    {
      absl::MutexLock l(&mu_);
      if (broken_ || closed_) return;
      f(out_);
    }
    pump();
  }

  void post(Msg msg, bool last, uint64_t version = 0) {
    {
      absl::MutexLock l(&mu_);
      if (broken_ || closed_ || version < version_) return;
      version_ = version;
      out_.clear();
      out_.push_back(std::move(msg));
      if (last) close_locked(grpc::Status::OK, /*with_last=*/true);
    }
    pump();
  }

  void close(const grpc::Status& st, std::optional<Msg> last = std::nullopt) {
    {
      absl::MutexLock l(&mu_);
      if (closed_) return;
      const bool with_last = last.has_value() && !broken_;
      if (with_last) out_.push_back(*std::move(last));
      close_locked(st, with_last);
    }
    pump();
  }
  void close(const absl::Status& st) { close(to_grpc_status(st)); }

  // (Replaces an outcome already given, unless the call has finished.)
  void abort(const absl::Status& st) {
    {
      absl::MutexLock l(&mu_);
      if (finished_) return;
      out_.clear();
      close_locked(to_grpc_status(st), false);
    }
    pump();
  }

  // Keeps the object alive until release() (OnDone's reference and work in flight on other threads).
  void hold() {
    absl::MutexLock l(&mu_);
    ++refs_;
  }
  void release() {
    bool last = false;
    {
      absl::MutexLock l(&mu_);
      last = --refs_ == 0;
    }
    if (last) delete this;
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock l(&mu_);
      writing_ = false;
      if (!ok) break_locked();
    }
    if (!ok) on_broken(absl::CancelledError(gone_msg_), /*write_failed=*/true);
    pump();
  }

 protected:
  ~CoalescingStream() override = default;

  // The stream can write no more (see the header); default: finish with `why`.
  virtual void on_broken(const absl::Status& why, bool /*write_failed*/) { abort(why); }
  // false: `next` is not written (Health: the same status as the last one written). Under mu_.
  virtual bool should_write(const Msg& /*next*/) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return true; }
  // The status the call finishes with, just before Finish (outside mu_); `failed`: a message could not be
  // serialized.
  virtual void before_finish(const grpc::Status& /*st*/, bool /*failed*/) {}

  bool broken() const {
    absl::MutexLock l(&mu_);
    return broken_;
  }
  // A write has been in flight for more than `limit_ns` (the client's flow-control window is closed). Under
  // mu_.
  bool write_stalled_locked(int64_t now_ns, int64_t limit_ns) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return writing_ && now_ns - t_write_ns_ > limit_ns;
  }

  mutable absl::Mutex mu_;

 private:
  void close_locked(const grpc::Status& st, bool with_last) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    closed_ = true;
    final_status_ = st;
    last_queued_ = with_last;
  }
  void break_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    broken_ = true;
    out_.clear();
  }

  // Starts the next write, or finishes the call when only the outcome is left.
  void pump() {
    enum class Action { kNone, kWrite, kWriteAndFinish, kFinish } action = Action::kNone;
    grpc::Status status;
    std::optional<absl::Status> broke;
    bool failed = false;
    {
      absl::MutexLock l(&mu_);
      if (writing_ || finished_) return;
      while (!out_.empty() && !should_write(out_.front())) out_.pop_front();
      if (!out_.empty()) {
        const bool last = finish_with_last_write_ && closed_ && last_queued_ && out_.size() == 1;
        if (absl::Status st = serialize_response(out_.front(), &wire_); !st.ok()) {
          failed_ = to_grpc_status(st);
          break_locked();
          broke = st;
        } else {
          out_.pop_front();
          writing_ = true;
          t_write_ns_ = RealClock::get().now_ns();
          action = last ? Action::kWriteAndFinish : Action::kWrite;
          finished_ = last;
        }
      }
      if (action == Action::kNone && closed_) {
        action = Action::kFinish;
        finished_ = true;
      }
      if (failed_) final_status_ = *failed_;
      failed = failed_.has_value();
      status = final_status_;
    }
    // May abort() or close(): that finishes through its own pump() unless this one finishes below.
    if (broke) on_broken(*broke, /*write_failed=*/false);
    if (action == Action::kWriteAndFinish || action == Action::kFinish) before_finish(status, failed);
    switch (action) {
      case Action::kNone:
        return;
      case Action::kWrite:
        StartWrite(&wire_);
        return;
      case Action::kWriteAndFinish:
        StartWriteAndFinish(&wire_, grpc::WriteOptions(), status);
        return;
      case Action::kFinish:
        Finish(status);
        return;
    }
  }

  const std::string gone_msg_;
  const bool finish_with_last_write_;
  std::deque<Msg> out_ ABSL_GUARDED_BY(mu_);  // not yet started
  grpc::ByteBuffer wire_;                     // the message in flight; touched only by pump() while !writing_
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;  // of the newest post()
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  int64_t t_write_ns_ ABSL_GUARDED_BY(mu_) = 0;  // when the write in flight started
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;       // the outcome is known
  bool last_queued_ ABSL_GUARDED_BY(mu_) = false;  // close() queued a last message
  bool finished_ ABSL_GUARDED_BY(mu_) = false;     // Finish (or StartWriteAndFinish) issued
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> failed_ ABSL_GUARDED_BY(mu_);  // a message could not be serialized
  int refs_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace frost::server
