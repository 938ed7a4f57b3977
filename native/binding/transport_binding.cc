// JS classes over the transport: Provider, Memory, MemoryRegion, Cq,
// Connection, Listener, Window.
//
// The hot path crosses once per batch: JS writes work requests into a buffer
// this side owns (Provider.sendBuffer / recvBuffer, u32 words laid out as
// WrLayout / RecvLayout) and calls postSend(n); poll(max) writes completions
// into Cq.completions (WcLayout) and returns how many. Nothing is allocated per
// work request.
//
// Lifetime: every wrapper holds the ProviderState, and with it the native
// provider, so whatever order the garbage collector or an environment's
// teardown finalizes wrappers in, the provider (and a verbs PD) goes last.
#include <sys/timerfd.h>
#include <unistd.h>
#include <uv.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "../transport/transport.h"
#include "addon.h"

namespace rkv::binding {

using namespace rkv::transport;

namespace {

class ConnectionWrap;

// Connection events, filled on the provider's thread, drained on the JS thread.
// The provider's thread holds only this, never the ProviderState, so it can
// never be the one to destroy (and join) the provider.
struct EventQueue {
  std::mutex mutex;
  std::deque<ConnectionEvent> events;
  Napi::ThreadSafeFunction notify;
  bool open = false;  // false once closed, or once Node finalized `notify` (environment teardown)

  void close() {
    bool was_open;
    {
      std::lock_guard<std::mutex> guard(mutex);
      was_open = open;
      open = false;
    }
    if (was_open) notify.Abort();
  }
  // The function's finalizer: at exit Node closes every thread-safe function
  // before it finalizes the wrappers, in no order we control, so a wrapper must
  // never touch one that is gone (with two providers that aborted the process).
  static void on_finalize(Napi::Env, std::shared_ptr<EventQueue>* queue, void*) {
    {
      std::lock_guard<std::mutex> guard((*queue)->mutex);
      (*queue)->open = false;
    }
    delete queue;
  }
};

// What every wrapper of one provider shares.
struct ProviderState {
  std::shared_ptr<Provider> provider;
  std::shared_ptr<EventQueue> queue = std::make_shared<EventQueue>();
  bool closed = false;

  // JS thread only.
  std::unordered_map<uint32_t, MemoryRegion*> regions;  // by lkey, to turn offsets into addresses
  std::unordered_map<Connection*, ConnectionWrap*> wrappers;
  std::vector<uint32_t> send_words = std::vector<uint32_t>(u32(Limit::MAX_POST_BATCH) * u32(WrLayout::WORDS));
  std::vector<uint32_t> recv_words = std::vector<uint32_t>(u32(Limit::MAX_POST_BATCH) * u32(RecvLayout::WORDS));
  std::vector<WorkRequest> wrs = std::vector<WorkRequest>(u32(Limit::MAX_POST_BATCH));
  std::vector<RecvRequest> rrs = std::vector<RecvRequest>(u32(Limit::MAX_POST_BATCH));

  ~ProviderState() {
    if (provider) provider->shutdown();
  }
};
using State = std::shared_ptr<ProviderState>;

AddonData* addon(Napi::Env env) { return env.GetInstanceData<AddonData>(); }

uint64_t join64(uint32_t lo, uint32_t hi) { return static_cast<uint64_t>(hi) << 32 | lo; }

std::vector<uint8_t> bytes_of(const Napi::Value& value, const char* what) {
  if (value.IsUndefined() || value.IsNull()) return {};
  if (!value.IsBuffer()) throw_error(value.Env(), "ERR_INVALID_ARG_TYPE", std::string(what) + " must be a Buffer");
  auto buffer = value.As<Napi::Buffer<uint8_t>>();
  return std::vector<uint8_t>(buffer.Data(), buffer.Data() + buffer.Length());
}

uint32_t u32_arg(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (!info[i].IsNumber()) throw_error(info.Env(), "ERR_INVALID_ARG_TYPE", std::string(what) + " must be a number");
  double v = info[i].As<Napi::Number>().DoubleValue();
  if (v < 0 || v > 4294967295.0 || v != static_cast<double>(static_cast<uint64_t>(v))) {
    throw_error(info.Env(), "ERR_OUT_OF_RANGE", std::string(what) + " must be an unsigned 32-bit integer");
  }
  return static_cast<uint32_t>(v);
}

// An ArrayBuffer over native memory that keeps `owner` alive while JS holds it.
template <typename Owner>
Napi::ArrayBuffer external_buffer(Napi::Env env, void* data, size_t length, std::shared_ptr<Owner> owner) {
  auto* hold = new std::shared_ptr<Owner>(std::move(owner));
  return Napi::ArrayBuffer::New(env, data, length, [](Napi::Env, void*, std::shared_ptr<Owner>* h) { delete h; },
                                hold);
}

const char* errno_code(int e) {
  switch (e) {
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    default: return "EIO";
  }
}

// ---- Memory ---------------------------------------------------------------------

class MemoryWrap : public Napi::ObjectWrap<MemoryWrap> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "Memory",
                       {InstanceAccessor<&MemoryWrap::length>("length"),
                        InstanceAccessor<&MemoryWrap::file_backed>("fileBacked"),
                        InstanceAccessor<&MemoryWrap::existed>("existed"),
                        InstanceAccessor<&MemoryWrap::page_kind>("pageKind"),
                        InstanceAccessor<&MemoryWrap::page_note>("pageNote"),
                        InstanceMethod<&MemoryWrap::buffer>("buffer")});
  }
  // new Memory(length, path?, hugePages?)
  explicit MemoryWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<MemoryWrap>(info) {
    if (!info[0].IsNumber()) throw_error(info.Env(), "ERR_INVALID_ARG_TYPE", "memory length must be a number");
    double length = info[0].As<Napi::Number>().DoubleValue();
    if (!(length >= 1) || length > 1e15) throw_error(info.Env(), "ERR_OUT_OF_RANGE", "memory length out of range");
    std::string path = info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
    std::string error;
    bool huge_pages = info.Length() > 2 && info[2].IsBoolean() && info[2].As<Napi::Boolean>().Value();
    memory_ = Memory::allocate(static_cast<size_t>(length), path, &error, huge_pages);
    if (!memory_) throw_error(info.Env(), "ERR_RKV_MEMORY", error);
  }
  std::shared_ptr<Memory> memory() const { return memory_; }

 private:
  Napi::Value length(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(memory_->length()));
  }
  Napi::Value file_backed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), memory_->file_backed()); }
  Napi::Value existed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), memory_->existed()); }
  Napi::Value page_kind(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), memory_->page_kind()); }
  Napi::Value page_note(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), memory_->page_note()); }
  // A view of the whole memory; it keeps the memory mapped while JS holds it.
  Napi::Value buffer(const Napi::CallbackInfo& info) {
    return external_buffer(info.Env(), memory_->data(), memory_->length(), memory_);
  }
  std::shared_ptr<Memory> memory_;
};

// ---- MemoryRegion -----------------------------------------------------------------

class MemoryRegionWrap : public Napi::ObjectWrap<MemoryRegionWrap> {
 public:
  struct Init {
    State state;
    std::shared_ptr<Memory> memory;
    std::shared_ptr<MemoryRegion> region;
  };
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "MemoryRegion",
                       {InstanceAccessor<&MemoryRegionWrap::lkey>("lkey"),
                        InstanceAccessor<&MemoryRegionWrap::rkey>("rkey"),
                        InstanceAccessor<&MemoryRegionWrap::addr>("addr"),
                        InstanceAccessor<&MemoryRegionWrap::length>("length"),
                        InstanceAccessor<&MemoryRegionWrap::access>("access"),
                        InstanceMethod<&MemoryRegionWrap::deregister>("deregister")});
  }
  explicit MemoryRegionWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<MemoryRegionWrap>(info) {
    auto* init = info[0].As<Napi::External<Init>>().Data();
    state_ = std::move(init->state);
    memory_ = std::move(init->memory);
    region_ = std::move(init->region);
    state_->regions[region_->lkey()] = region_.get();
  }
  ~MemoryRegionWrap() override { release(); }

 private:
  void release() {
    if (!region_) return;
    auto it = state_->regions.find(region_->lkey());
    if (it != state_->regions.end() && it->second == region_.get()) state_->regions.erase(it);
    region_.reset();  // deregisters before the memory it covers can go, unless a window still holds it
  }

 public:
  // A window's region: the registration it holds while bound.
  std::shared_ptr<MemoryRegion> shared(Napi::Env env) {
    region(env);
    return region_;
  }

 private:
  MemoryRegion& region(Napi::Env env) {
    if (!region_) throw_error(env, "ERR_RKV_CLOSED", "memory region was deregistered");
    return *region_;
  }
  Napi::Value lkey(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), region(info.Env()).lkey()); }
  Napi::Value rkey(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), region(info.Env()).rkey()); }
  Napi::Value addr(const Napi::CallbackInfo& info) {
    return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(region(info.Env()).addr())));
  }
  Napi::Value length(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(region(info.Env()).length()));
  }
  Napi::Value access(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), region(info.Env()).access()); }
  Napi::Value deregister(const Napi::CallbackInfo& info) {
    release();
    return info.Env().Undefined();
  }

  State state_;
  std::shared_ptr<Memory> memory_;
  std::shared_ptr<MemoryRegion> region_;
};

// ---- Window -----------------------------------------------------------------------

class WindowWrap : public Napi::ObjectWrap<WindowWrap> {
 public:
  struct Init {
    State state;
    std::shared_ptr<Window> window;
  };
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "Window",
                       {InstanceAccessor<&WindowWrap::rkey>("rkey"), InstanceAccessor<&WindowWrap::addr>("addr"),
                        InstanceAccessor<&WindowWrap::length>("length"),
                        InstanceAccessor<&WindowWrap::access>("access"),
                        InstanceAccessor<&WindowWrap::valid>("valid"),
                        InstanceMethod<&WindowWrap::invalidate>("invalidate")});
  }
  explicit WindowWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<WindowWrap>(info) {
    auto* init = info[0].As<Napi::External<Init>>().Data();
    state_ = std::move(init->state);
    window_ = std::move(init->window);
  }
  // Unreachable from JS: nobody can hand its rkey out any more, and a window
  // nobody holds must not stay bound.
  ~WindowWrap() override { window_->invalidate(); }

 private:
  Napi::Value rkey(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), window_->rkey()); }
  Napi::Value addr(const Napi::CallbackInfo& info) { return Napi::BigInt::New(info.Env(), window_->addr()); }
  Napi::Value length(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(window_->length()));
  }
  Napi::Value access(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), window_->access()); }
  Napi::Value valid(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), window_->valid()); }
  Napi::Value invalidate(const Napi::CallbackInfo& info) {
    window_->invalidate();
    return info.Env().Undefined();
  }

  State state_;  // first: the provider outlives the window
  std::shared_ptr<Window> window_;
};

// ---- Cq ------------------------------------------------------------------------

// Calls a CQ's watch callback from the JS thread's event loop: a uv_poll on the CQ's event fd
// and, with moderation, one on a timerfd (libuv's own timers count whole milliseconds). JS
// thread only. Owned by its CqWrap and, until libuv has closed both handles, by itself; the
// environment's teardown stops it like unwatch() does.
//
// Should the event fd fail (POLLERR: an ibverbs completion channel says so once its device is
// gone, as in a NIC's reset), libuv stops polling it and calls back with UV_EBADF. The CQ is
// then polled by the timerfd every kFallbackPollUs instead, so its completions (the flush
// errors that tell the connections are gone among them) are still taken, and `on_failure` is
// called once with the reason. Without it the watch went silent and its ops never finished.
class CqWatcher {
 public:
  static constexpr uint32_t kFallbackPollUs = 1000;

  static std::shared_ptr<CqWatcher> start(Napi::Env env, State state, std::shared_ptr<CompletionQueue> cq,
                                          Napi::Function callback, Napi::Function on_failure, uint32_t moderation_us) {
    std::shared_ptr<CqWatcher> self(new CqWatcher(env, std::move(state), std::move(cq), moderation_us));
    uv_loop_t* loop = nullptr;
    if (napi_get_uv_event_loop(env, &loop) != napi_ok) throw_error(env, "ERR_RKV_STATE", "no event loop to watch the CQ on");
    if (moderation_us > 0) {
      self->timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
      if (self->timer_fd_ < 0) throw_error(env, "ERR_RKV_STATE", "cannot make a timer to moderate the CQ's wake-ups");
    }
    self->callback_ = Napi::Persistent(callback);
    if (!on_failure.IsEmpty()) self->on_failure_ = Napi::Persistent(on_failure);
    napi_value name = Napi::String::New(env, "rdma-kv cq");
    napi_async_init(env, nullptr, name, &self->context_);
    self->self_ = self;  // until the handles are closed
    try {
      self->open(loop, &self->event_poll_, self->cq_->event_fd(), &CqWatcher::on_event);
      if (self->timer_fd_ >= 0) self->open(loop, &self->timer_poll_, self->timer_fd_, &CqWatcher::on_timer);
    } catch (...) {
      self->stop();
      throw;
    }
    napi_add_async_cleanup_hook(env, &CqWatcher::on_teardown, self.get(), &self->teardown_);
    return self;
  }

  bool stopped() const { return stopped_; }

  // For tests: what libuv does when the event fd reports POLLERR (uv__poll_io stops the handle,
  // then calls back with UV_EBADF).
  void fail_events_for_test() {
    if (stopped_) return;
    uv_poll_stop(&event_poll_);
    on_event(&event_poll_, UV_EBADF, 0);
  }

  // Idempotent. May run inside the callback (an unwatch from it).
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    callback_.Reset();
    on_failure_.Reset();
    if (context_ != nullptr) napi_async_destroy(env_, context_);
    context_ = nullptr;
    for (uv_poll_t* handle : {&event_poll_, &timer_poll_}) {
      if (handle->data == nullptr) continue;
      uv_poll_stop(handle);
      uv_close(reinterpret_cast<uv_handle_t*>(handle), &CqWatcher::on_closed);
    }
    if (open_handles_ == 0) finish();
  }

 private:
  CqWatcher(Napi::Env env, State state, std::shared_ptr<CompletionQueue> cq, uint32_t moderation_us)
      : env_(env), state_(std::move(state)), cq_(std::move(cq)), moderation_us_(moderation_us) {}

  void open(uv_loop_t* loop, uv_poll_t* handle, int fd, uv_poll_cb cb) {
    if (!try_open(loop, handle, fd, cb)) throw_error(Napi::Env(env_), "ERR_RKV_STATE", "cannot poll the CQ's event fd");
  }
  bool try_open(uv_loop_t* loop, uv_poll_t* handle, int fd, uv_poll_cb cb) {
    if (uv_poll_init(loop, handle, fd) != 0) return false;
    handle->data = this;
    open_handles_++;
    uv_poll_start(handle, UV_READABLE, cb);
    return true;
  }

  static void on_event(uv_poll_t* handle, int status, int) {
    auto* self = static_cast<CqWatcher*>(handle->data);
    if (self->stopped_) return;
    if (status < 0) return self->events_failed(handle->loop, status);
    self->cq_->ack_event();
    if (!self->busy_) self->run();  // busy: the timer drains
  }
  // An error on the timer (libuv stops its handle) is taken as its expiry: busy_ must not stay set.
  static void on_timer(uv_poll_t* handle, int status, int) {
    auto* self = static_cast<CqWatcher*>(handle->data);
    uint64_t expirations;
    ssize_t rc = read(self->timer_fd_, &expirations, sizeof expirations);
    (void)rc;
    if (self->stopped_) return;
    self->busy_ = false;
    if (status < 0) self->timer_broken_ = true;  // from now on the CQ is armed after every pass
    self->run();
  }

  // The event fd failed (libuv has stopped its poll): the timerfd, made now if moderation did
  // not make one, ticks every kFallbackPollUs and each tick calls back.
  void events_failed(uv_loop_t* loop, int status) {
    if (events_failed_) return;
    events_failed_ = true;
    uv_poll_stop(&event_poll_);  // libuv's error path has stopped it already
    bool polled = false;  // the timerfd's poll runs
    if (timer_fd_ < 0) {
      timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
      polled = timer_fd_ >= 0 && try_open(loop, &timer_poll_, timer_fd_, &CqWatcher::on_timer);
      if (timer_fd_ >= 0 && !polled) {
        ::close(timer_fd_);
        timer_fd_ = -1;
      }
    } else {
      // Moderation's: started again, as an error of its own may have stopped it (timer_broken_).
      polled = uv_poll_start(&timer_poll_, UV_READABLE, &CqWatcher::on_timer) == 0;
    }
    itimerspec every{};
    every.it_interval = every.it_value = after_us(kFallbackPollUs);
    const bool ticking = polled && timerfd_settime(timer_fd_, 0, &every, nullptr) == 0;
    std::string reason = std::string("the CQ's event fd failed (") + uv_strerror(status) + "): " +
                         (ticking ? "polling the CQ every " + std::to_string(kFallbackPollUs) + " µs instead"
                                  : "no timer could replace it, so nothing polls the CQ now");
    if (!on_failure_.IsEmpty()) call(on_failure_, &reason);
    if (!stopped_) call(callback_);  // what may have arrived since the last call
  }

  // A timerfd interval of `us` microseconds (its nanoseconds field must stay below a second).
  static timespec after_us(uint32_t us) {
    timespec at{};
    at.tv_sec = us / 1000000;
    at.tv_nsec = static_cast<long>(us % 1000000) * 1000;
    return at;
  }

  void run() {
    if (events_failed_) {
      call(callback_);  // a tick of the fallback timer: no arming, no moderation
      return;
    }
    bool found = call(callback_);
    if (moderation_us_ == 0 || stopped_) return;
    if (found && !timer_broken_) {
      itimerspec in{};
      in.it_value = after_us(moderation_us_);
      if (timerfd_settime(timer_fd_, 0, &in, nullptr) == 0) {
        busy_ = true;
        return;
      }
      timer_broken_ = true;  // never busy without a timer to end it: events from now on
    }
    cq_->arm();
    call(callback_);  // completions that raced with arm() bring no event (any found now raise one: the CQ is armed)
  }

  // A callback through node's MakeCallback, so promises it settles run their reactions after
  // it; true when it returned a positive count. Raw N-API: no C++ exception crosses libuv, and
  // the null "exception" of a worker being terminated is not reported as an uncaught one.
  // `text`: the one (string) argument, if any.
  bool call(const Napi::FunctionReference& fn, const std::string* text = nullptr) {
    if (fn.IsEmpty()) return false;
    napi_handle_scope scope;
    if (napi_open_handle_scope(env_, &scope) != napi_ok) return false;
    napi_value global, result, arg = nullptr;
    double found = 0;
    napi_status status = napi_get_global(env_, &global);
    if (status == napi_ok && text != nullptr) status = napi_create_string_utf8(env_, text->data(), text->size(), &arg);
    if (status == napi_ok) status = napi_make_callback(env_, context_, global, fn.Value(), arg ? 1 : 0, arg ? &arg : nullptr, &result);
    if (status == napi_ok) {
      if (napi_get_value_double(env_, result, &found) != napi_ok) found = 0;
    } else if (status == napi_pending_exception) {
      napi_value error;
      napi_valuetype type = napi_undefined;
      if (napi_get_and_clear_last_exception(env_, &error) == napi_ok) napi_typeof(env_, error, &type);
      if (type != napi_null && type != napi_undefined) napi_fatal_exception(env_, error);  // 'uncaughtException'
    }
    napi_close_handle_scope(env_, scope);
    return found > 0;
  }

  static void on_closed(uv_handle_t* handle) {
    auto* self = static_cast<CqWatcher*>(handle->data);
    if (--self->open_handles_ == 0) self->finish();
  }
  void finish() {
    if (timer_fd_ >= 0) ::close(timer_fd_);
    timer_fd_ = -1;
    if (teardown_ != nullptr) napi_remove_async_cleanup_hook(teardown_);
    teardown_ = nullptr;
    self_.reset();  // may delete this: the last thing done
  }
  static void on_teardown(napi_async_cleanup_hook_handle, void* arg) { static_cast<CqWatcher*>(arg)->stop(); }

  napi_env env_;
  State state_;  // the provider outlives the CQ, as for every wrapper
  std::shared_ptr<CompletionQueue> cq_;
  uint32_t moderation_us_;
  Napi::FunctionReference callback_;
  Napi::FunctionReference on_failure_;  // may be empty
  napi_async_context context_ = nullptr;
  napi_async_cleanup_hook_handle teardown_ = nullptr;
  uv_poll_t event_poll_{}, timer_poll_{};
  int timer_fd_ = -1;
  int open_handles_ = 0;
  bool busy_ = false, stopped_ = false, timer_broken_ = false, events_failed_ = false;
  std::shared_ptr<CqWatcher> self_;
};

class CqWrap : public Napi::ObjectWrap<CqWrap> {
 public:
  struct Init {
    State state;
    std::shared_ptr<CompletionQueue> cq;
  };
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "Cq",
                       {InstanceMethod<&CqWrap::poll>("poll"), InstanceMethod<&CqWrap::arm>("arm"),
                        InstanceMethod<&CqWrap::ack_event>("ackEvent"), InstanceMethod<&CqWrap::watch>("watch"),
                        InstanceMethod<&CqWrap::unwatch>("unwatch"),
                        InstanceMethod<&CqWrap::fail_events_for_test>("failEventsForTest"),
                        InstanceAccessor<&CqWrap::completions>("completions"),
                        InstanceAccessor<&CqWrap::event_fd>("eventFd"), InstanceAccessor<&CqWrap::depth>("depth")});
  }
  explicit CqWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CqWrap>(info) {
    auto* init = info[0].As<Napi::External<Init>>().Data();
    state_ = std::move(init->state);
    cq_ = std::move(init->cq);
    words_ = std::make_shared<std::vector<uint32_t>>(u32(Limit::MAX_POLL_BATCH) * u32(WcLayout::WORDS));
    batch_.resize(u32(Limit::MAX_POLL_BATCH));
  }
  ~CqWrap() override { stop_watching(); }
  std::shared_ptr<CompletionQueue> cq() const { return cq_; }
  const State& state() const { return state_; }

 private:
  // poll(max) -> count; the completions are in this.completions (WcLayout words).
  Napi::Value poll(const Napi::CallbackInfo& info) {
    uint32_t max = std::min(u32_arg(info, 0, "max"), u32(Limit::MAX_POLL_BATCH));
    int n = cq_->poll(batch_.data(), static_cast<int>(max));
    for (int i = 0; i < n; i++) write_completion(words_->data() + i * u32(WcLayout::WORDS), batch_[i]);
    return Napi::Number::New(info.Env(), n);
  }
  Napi::Value arm(const Napi::CallbackInfo& info) {
    cq_->arm();
    return info.Env().Undefined();
  }
  Napi::Value ack_event(const Napi::CallbackInfo& info) {
    cq_->ack_event();
    return info.Env().Undefined();
  }
  Napi::Value completions(const Napi::CallbackInfo& info) {
    auto buffer = external_buffer(info.Env(), words_->data(), words_->size() * 4, words_);
    return Napi::Uint32Array::New(info.Env(), words_->size(), buffer, 0);
  }
  Napi::Value event_fd(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), cq_->event_fd()); }
  Napi::Value depth(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), cq_->depth()); }

  // watch(callback, moderationUs = 0): the JS thread's own event loop (libuv) polls the CQ's
  // event fd, so a completion wakes one thread: no watcher thread that then wakes the JS thread.
  // Without moderation each event calls back once, and the callback drains and re-arms. With
  // moderationUs (a NIC's interrupt moderation, done here) an event calls back at once and the CQ
  // then stays unarmed while completions keep coming: a timer calls back every moderationUs until
  // a callback finds nothing (it returns how many completions it polled); then the CQ is armed and
  // drained once more. A steady stream costs one timer wake-up per moderationUs and no events.
  Napi::Value watch(const Napi::CallbackInfo& info) {
    if (watcher_ && !watcher_->stopped()) throw_error(info.Env(), "ERR_RKV_STATE", "this CQ is already watched");
    if (!info[0].IsFunction()) throw_error(info.Env(), "ERR_INVALID_ARG_TYPE", "watch needs a callback");
    uint32_t moderation_us = info.Length() > 1 && !info[1].IsUndefined() ? u32_arg(info, 1, "moderationUs") : 0;
    Napi::Function on_failure;
    if (info.Length() > 2 && !info[2].IsUndefined()) {
      if (!info[2].IsFunction()) throw_error(info.Env(), "ERR_INVALID_ARG_TYPE", "watch's onEventsFailed must be a function");
      on_failure = info[2].As<Napi::Function>();
    }
    watcher_ = CqWatcher::start(info.Env(), state_, cq_, info[0].As<Napi::Function>(), on_failure, moderation_us);
    return info.Env().Undefined();
  }
  // For tests: the watch's event fd fails as on POLLERR (CqWatcher::fail_events_for_test).
  Napi::Value fail_events_for_test(const Napi::CallbackInfo& info) {
    if (!watcher_ || watcher_->stopped()) throw_error(info.Env(), "ERR_RKV_STATE", "this CQ is not watched");
    watcher_->fail_events_for_test();
    return info.Env().Undefined();
  }
  Napi::Value unwatch(const Napi::CallbackInfo& info) {
    stop_watching();
    return info.Env().Undefined();
  }
  void stop_watching() {
    if (watcher_) watcher_->stop();
    watcher_.reset();
  }

  State state_;
  std::shared_ptr<CompletionQueue> cq_;
  std::shared_ptr<std::vector<uint32_t>> words_;
  std::vector<Completion> batch_;
  std::shared_ptr<CqWatcher> watcher_;
};

// ---- Connection -----------------------------------------------------------------

QueuePairOptions qp_options(const Napi::Env& env, const State& state, const Napi::Value& value) {
  if (!value.IsObject()) throw_error(env, "ERR_INVALID_ARG_TYPE", "queue pair options must be an object");
  Napi::Object o = value.As<Napi::Object>();
  QueuePairOptions options;
  AddonData* data = addon(env);
  for (const char* key : {"sendCq", "recvCq"}) {
    Napi::Value cq = o.Get(key);
    if (!cq.IsObject() || !cq.As<Napi::Object>().InstanceOf(data->cq.Value())) {
      throw_error(env, "ERR_INVALID_ARG_TYPE", std::string(key) + " must be a Cq");
    }
    auto shared = CqWrap::Unwrap(cq.As<Napi::Object>())->cq();
    (std::strcmp(key, "sendCq") == 0 ? options.send_cq : options.recv_cq) = shared;
  }
  if (o.Get("sendDepth").IsNumber()) options.send_depth = o.Get("sendDepth").As<Napi::Number>().Uint32Value();
  if (o.Get("recvDepth").IsNumber()) options.recv_depth = o.Get("recvDepth").As<Napi::Number>().Uint32Value();
  if (o.Get("maxInline").IsNumber()) options.max_inline = o.Get("maxInline").As<Napi::Number>().Uint32Value();
  // initialRecvs: how many receive requests in Provider.recvBuffer to post before RTR.
  uint32_t initial = o.Get("initialRecvs").IsNumber() ? o.Get("initialRecvs").As<Napi::Number>().Uint32Value() : 0;
  if (initial > u32(Limit::MAX_POST_BATCH)) throw_error(env, "ERR_OUT_OF_RANGE", "too many initial receives");
  const uint32_t* w = state->recv_words.data();
  for (uint32_t i = 0; i < initial; i++, w += u32(RecvLayout::WORDS)) {
    RecvRequest r;
    r.wr_id = join64(w[u32(RecvLayout::WR_ID_LO)], w[u32(RecvLayout::WR_ID_HI)]);
    r.lkey = w[u32(RecvLayout::LKEY)];
    r.length = w[u32(RecvLayout::LENGTH)];
    auto mr = state->regions.find(r.lkey);
    uint64_t offset = w[u32(RecvLayout::LOCAL_OFFSET)];
    if (mr != state->regions.end() && mr->second->contains(reinterpret_cast<uint64_t>(mr->second->addr()) + offset, r.length)) {
      r.addr = reinterpret_cast<uint64_t>(mr->second->addr()) + offset;
    } else {
      r.lkey = 0;  // the provider reports LOC_PROT_ERR when a message lands here
    }
    options.initial_recvs.push_back(r);
  }
  return options;
}

class ConnectionWrap : public Napi::ObjectWrap<ConnectionWrap> {
 public:
  struct Init {
    State state;
    std::shared_ptr<Connection> connection;
  };
  static Napi::Function define(Napi::Env env) {
    return DefineClass(
        env, "Connection",
        {InstanceMethod<&ConnectionWrap::post_send>("postSend"), InstanceMethod<&ConnectionWrap::post_recv>("postRecv"),
         InstanceMethod<&ConnectionWrap::accept>("accept"), InstanceMethod<&ConnectionWrap::reject>("reject"),
         InstanceMethod<&ConnectionWrap::disconnect>("disconnect"),
         InstanceMethod<&ConnectionWrap::fence_complete>("fenceComplete"),
         InstanceMethod<&ConnectionWrap::bind_window>("bindWindow"),
         InstanceAccessor<&ConnectionWrap::state>("state"), InstanceAccessor<&ConnectionWrap::qp_num>("qpNum"),
         InstanceAccessor<&ConnectionWrap::max_inline>("maxInline"),
         InstanceAccessor<&ConnectionWrap::peer_private_data>("peerPrivateData"),
         InstanceAccessor<&ConnectionWrap::peer_address>("peerAddress"),
         InstanceAccessor<&ConnectionWrap::first_error>("firstError")});
  }
  explicit ConnectionWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ConnectionWrap>(info) {
    auto* init = info[0].As<Napi::External<Init>>().Data();
    state_ = std::move(init->state);
    connection_ = std::move(init->connection);
    state_->wrappers[connection_.get()] = this;
  }
  ~ConnectionWrap() override {
    auto it = state_->wrappers.find(connection_.get());
    if (it != state_->wrappers.end() && it->second == this) state_->wrappers.erase(it);
    // Unreachable from JS and still connected: nobody can poll it any more.
    if (connection_->state() == ConnState::CONNECTED || connection_->state() == ConnState::CONNECTING) {
      connection_->disconnect();
    }
  }

  std::shared_ptr<Connection> connection() const { return connection_; }

  static Napi::Object wrap(Napi::Env env, const State& state, std::shared_ptr<Connection> connection) {
    auto it = state->wrappers.find(connection.get());
    if (it != state->wrappers.end()) return it->second->Value();
    Init init{state, std::move(connection)};
    return addon(env)->connection.New({Napi::External<Init>::New(env, &init)});
  }

 private:
  // postSend(count): posts Provider.sendBuffer[0..count) with one doorbell.
  Napi::Value post_send(const Napi::CallbackInfo& info) {
    uint32_t count = u32_arg(info, 0, "count");
    if (count > u32(Limit::MAX_POST_BATCH)) throw_error(info.Env(), "ERR_OUT_OF_RANGE", "batch larger than MAX_POST_BATCH");
    const uint32_t* w = state_->send_words.data();
    for (uint32_t i = 0; i < count; i++, w += u32(WrLayout::WORDS)) {
      WorkRequest& wr = state_->wrs[i];
      wr.wr_id = join64(w[u32(WrLayout::WR_ID_LO)], w[u32(WrLayout::WR_ID_HI)]);
      uint32_t opcode = w[u32(WrLayout::OPCODE)];
      if (opcode > u32(Opcode::FETCH_AND_ADD) || opcode == u32(Opcode::RECV)) {
        throw_error(info.Env(), "EINVAL", "work request " + std::to_string(i) + " has no send-queue opcode");
      }
      wr.opcode = static_cast<Opcode>(opcode);
      wr.send_flags = w[u32(WrLayout::FLAGS)];
      wr.length = w[u32(WrLayout::LENGTH)];
      wr.lkey = w[u32(WrLayout::LKEY)];
      uint64_t offset = w[u32(WrLayout::LOCAL_OFFSET)];
      auto mr = state_->regions.find(wr.lkey);
      if (mr != state_->regions.end() &&
          mr->second->contains(reinterpret_cast<uint64_t>(mr->second->addr()) + offset, wr.length)) {
        wr.local_addr = reinterpret_cast<uint64_t>(mr->second->addr()) + offset;
      } else {
        // Never hand a wild address down: the provider answers LOC_PROT_ERR.
        wr.local_addr = 0;
        wr.lkey = 0;
        wr.send_flags &= ~u32(SendFlag::INLINE);
      }
      wr.remote_addr = join64(w[u32(WrLayout::REMOTE_ADDR_LO)], w[u32(WrLayout::REMOTE_ADDR_HI)]);
      wr.rkey = w[u32(WrLayout::RKEY)];
      wr.compare_add = join64(w[u32(WrLayout::COMPARE_ADD_LO)], w[u32(WrLayout::COMPARE_ADD_HI)]);
      wr.swap = join64(w[u32(WrLayout::SWAP_LO)], w[u32(WrLayout::SWAP_HI)]);
      wr.imm = w[u32(WrLayout::IMM)];
    }
    size_t bad = 0;
    int rc = connection_->post_send(state_->wrs.data(), count, &bad);
    if (rc != 0) post_failed(info.Env(), rc, bad, "postSend");
    return info.Env().Undefined();
  }
  Napi::Value post_recv(const Napi::CallbackInfo& info) {
    uint32_t count = u32_arg(info, 0, "count");
    if (count > u32(Limit::MAX_POST_BATCH)) throw_error(info.Env(), "ERR_OUT_OF_RANGE", "batch larger than MAX_POST_BATCH");
    const uint32_t* w = state_->recv_words.data();
    for (uint32_t i = 0; i < count; i++, w += u32(RecvLayout::WORDS)) {
      RecvRequest& r = state_->rrs[i];
      r.wr_id = join64(w[u32(RecvLayout::WR_ID_LO)], w[u32(RecvLayout::WR_ID_HI)]);
      r.lkey = w[u32(RecvLayout::LKEY)];
      r.length = w[u32(RecvLayout::LENGTH)];
      uint64_t offset = w[u32(RecvLayout::LOCAL_OFFSET)];
      auto mr = state_->regions.find(r.lkey);
      if (mr != state_->regions.end() &&
          mr->second->contains(reinterpret_cast<uint64_t>(mr->second->addr()) + offset, r.length)) {
        r.addr = reinterpret_cast<uint64_t>(mr->second->addr()) + offset;
      } else {
        r.addr = 0;
        r.lkey = 0;
      }
    }
    size_t bad = 0;
    int rc = connection_->post_recv(state_->rrs.data(), count, &bad);
    if (rc != 0) post_failed(info.Env(), rc, bad, "postRecv");
    return info.Env().Undefined();
  }
  [[noreturn]] void post_failed(Napi::Env env, int rc, size_t bad, const char* verb) {
    Napi::Error error = make_error(env, errno_code(rc), std::string(verb) + ": " + std::strerror(rc) + " at request " +
                                                            std::to_string(bad) + " (the ones before it were posted)");
    error.Set("posted", Napi::Number::New(env, static_cast<double>(bad)));
    throw error;
  }
  Napi::Value accept(const Napi::CallbackInfo& info) {
    QueuePairOptions options = qp_options(info.Env(), state_, info[0]);
    std::string error;
    if (!connection_->accept(options, bytes_of(info[1], "private data"), &error)) {
      throw_error(info.Env(), "ERR_RKV_ACCEPT", error);
    }
    return info.Env().Undefined();
  }
  Napi::Value reject(const Napi::CallbackInfo& info) {
    connection_->reject(bytes_of(info[0], "private data"));
    return info.Env().Undefined();
  }
  Napi::Value fence_complete(const Napi::CallbackInfo& info) {
    return Napi::Boolean::New(info.Env(), connection_->fence_complete());
  }
  // bindWindow(region, offset, length, access) -> Window
  Napi::Value bind_window(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsObject() || !info[0].As<Napi::Object>().InstanceOf(addon(env)->memory_region.Value())) {
      throw_error(env, "ERR_INVALID_ARG_TYPE", "bindWindow(region: MemoryRegion, offset, length, access)");
    }
    auto region = MemoryRegionWrap::Unwrap(info[0].As<Napi::Object>())->shared(env);
    if (!info[1].IsNumber() || !info[2].IsNumber()) throw_error(env, "ERR_INVALID_ARG_TYPE", "offset and length must be numbers");
    const double offset = info[1].As<Napi::Number>().DoubleValue(), length = info[2].As<Napi::Number>().DoubleValue();
    if (!(offset >= 0) || !(length >= 0) || offset + length > static_cast<double>(region->length())) {
      throw_error(env, "ERR_OUT_OF_RANGE", "the window must lie inside the region");
    }
    std::string error;
    auto window = connection_->bind_window(region, reinterpret_cast<uint64_t>(region->addr()) + static_cast<uint64_t>(offset),
                                           static_cast<uint64_t>(length), u32_arg(info, 3, "access"), &error);
    if (!window) throw_error(env, "ERR_RKV_WINDOW", error);
    WindowWrap::Init init{state_, std::move(window)};
    return addon(env)->window.New({Napi::External<WindowWrap::Init>::New(env, &init)});
  }
  Napi::Value disconnect(const Napi::CallbackInfo& info) {
    connection_->disconnect();
    return info.Env().Undefined();
  }
  Napi::Value state(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), u32(connection_->state())); }
  Napi::Value qp_num(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), connection_->qp_num()); }
  Napi::Value max_inline(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), connection_->max_inline()); }
  Napi::Value peer_private_data(const Napi::CallbackInfo& info) {
    const auto& data = connection_->peer_private_data();
    return Napi::Buffer<uint8_t>::Copy(info.Env(), data.data(), data.size());
  }
  Napi::Value peer_address(const Napi::CallbackInfo& info) {
    return Napi::String::New(info.Env(), connection_->peer_address());
  }
  Napi::Value first_error(const Napi::CallbackInfo& info) {
    return Napi::String::New(info.Env(), connection_->first_error());
  }

  State state_;
  std::shared_ptr<Connection> connection_;
};

// ---- Listener -------------------------------------------------------------------

class ListenerWrap : public Napi::ObjectWrap<ListenerWrap> {
 public:
  struct Init {
    State state;
    std::shared_ptr<Listener> listener;
  };
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "Listener",
                       {InstanceAccessor<&ListenerWrap::url>("url"), InstanceMethod<&ListenerWrap::close>("close")});
  }
  explicit ListenerWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ListenerWrap>(info) {
    auto* init = info[0].As<Napi::External<Init>>().Data();
    state_ = std::move(init->state);
    listener_ = std::move(init->listener);
  }
  ~ListenerWrap() override { listener_->close(); }

 private:
  Napi::Value url(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), listener_->url()); }
  Napi::Value close(const Napi::CallbackInfo& info) {
    listener_->close();
    return info.Env().Undefined();
  }
  State state_;
  std::shared_ptr<Listener> listener_;
};

// ---- Provider ---------------------------------------------------------------------

class ProviderWrap : public Napi::ObjectWrap<ProviderWrap> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(
        env, "Provider",
        {InstanceMethod<&ProviderWrap::register_memory>("register"),
         InstanceMethod<&ProviderWrap::create_cq>("createCq"), InstanceMethod<&ProviderWrap::listen>("listen"),
         InstanceMethod<&ProviderWrap::connect>("connect"), InstanceMethod<&ProviderWrap::drain_events>("drainEvents"),
         InstanceMethod<&ProviderWrap::ref>("ref"), InstanceMethod<&ProviderWrap::unref>("unref"),
         InstanceMethod<&ProviderWrap::close>("close"), InstanceAccessor<&ProviderWrap::device_info>("deviceInfo"),
         InstanceAccessor<&ProviderWrap::scheme>("scheme"),
         InstanceAccessor<&ProviderWrap::send_buffer>("sendBuffer"),
         InstanceAccessor<&ProviderWrap::recv_buffer>("recvBuffer")});
  }
  // new Provider(scheme, onEvents): onEvents() is called (without arguments)
  // whenever connection events wait in drainEvents().
  explicit ProviderWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ProviderWrap>(info) {
    Napi::Env env = info.Env();
    if (!info[0].IsString() || !info[1].IsFunction()) {
      throw_error(env, "ERR_INVALID_ARG_TYPE", "new Provider(scheme: string, onEvents: function)");
    }
    state_ = std::make_shared<ProviderState>();
    auto queue = state_->queue;
    queue->notify = Napi::ThreadSafeFunction::New(env, info[1].As<Napi::Function>(), "rdma-kv events", 0, 1,
                                                  static_cast<void*>(nullptr), &EventQueue::on_finalize,
                                                  new std::shared_ptr<EventQueue>(queue));
    queue->notify.Unref(env);  // the TS layer refs it while listeners or connections are open
    queue->open = true;
    EventSink sink = [queue](ConnectionEvent&& event) {
      std::lock_guard<std::mutex> guard(queue->mutex);
      if (!queue->open) return;
      queue->events.push_back(std::move(event));
      if (queue->events.size() == 1) queue->notify.NonBlockingCall();  // one wake-up per batch
    };
    std::string error;
    std::unique_ptr<Provider> provider = create_provider(info[0].As<Napi::String>().Utf8Value(), sink, &error);
    if (!provider) {
      state_->queue->close();
      throw_error(env, "ERR_RKV_PROVIDER", error);
    }
    state_->provider = std::move(provider);
  }
  ~ProviderWrap() override { state_->queue->close(); }
  std::shared_ptr<Provider> provider() const { return state_->provider; }

 private:
  Provider& provider(Napi::Env env) {
    if (state_->closed) throw_error(env, "ERR_RKV_CLOSED", "the provider is closed");
    return *state_->provider;
  }
  Napi::Value register_memory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsObject() || !info[0].As<Napi::Object>().InstanceOf(addon(env)->memory.Value())) {
      throw_error(env, "ERR_INVALID_ARG_TYPE", "register(memory: Memory, offset, length, access)");
    }
    auto memory = MemoryWrap::Unwrap(info[0].As<Napi::Object>())->memory();
    double offset = info[1].As<Napi::Number>().DoubleValue(), length = info[2].As<Napi::Number>().DoubleValue();
    if (!(offset >= 0) || !(length >= 0)) throw_error(env, "ERR_OUT_OF_RANGE", "offset and length must be >= 0");
    std::string error;
    auto region = provider(env).register_memory(*memory, static_cast<size_t>(offset), static_cast<size_t>(length),
                                                u32_arg(info, 3, "access"), &error);
    if (!region) throw_error(env, "ERR_RKV_REGISTER", error);
    MemoryRegionWrap::Init init{state_, memory, std::move(region)};
    return addon(env)->memory_region.New({Napi::External<MemoryRegionWrap::Init>::New(env, &init)});
  }
  Napi::Value create_cq(const Napi::CallbackInfo& info) {
    std::string error;
    auto cq = provider(info.Env()).create_cq(u32_arg(info, 0, "depth"), &error);
    if (!cq) throw_error(info.Env(), "ERR_RKV_CQ", error);
    CqWrap::Init init{state_, std::move(cq)};
    return addon(info.Env())->cq.New({Napi::External<CqWrap::Init>::New(info.Env(), &init)});
  }
  Napi::Value listen(const Napi::CallbackInfo& info) {
    if (!info[0].IsString()) throw_error(info.Env(), "ERR_INVALID_ARG_TYPE", "listen(url: string)");
    std::string error;
    auto listener = provider(info.Env()).listen(info[0].As<Napi::String>().Utf8Value(), &error);
    if (!listener) throw_error(info.Env(), "ERR_RKV_LISTEN", error);
    ListenerWrap::Init init{state_, std::move(listener)};
    return addon(info.Env())->listener.New({Napi::External<ListenerWrap::Init>::New(info.Env(), &init)});
  }
  // connect(url, qpOptions, privateData?, timeoutMs) -> Connection (CONNECTING)
  Napi::Value connect(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsString()) throw_error(env, "ERR_INVALID_ARG_TYPE", "connect(url: string, options, privateData, timeoutMs)");
    QueuePairOptions options = qp_options(env, state_, info[1]);
    std::vector<uint8_t> private_data = bytes_of(info[2], "private data");
    uint32_t timeout = u32_arg(info, 3, "timeoutMs");
    std::string error;
    auto connection = provider(env).connect(info[0].As<Napi::String>().Utf8Value(), options, private_data, timeout, &error);
    if (!connection) throw_error(env, "ERR_RKV_CONNECT", error);
    return ConnectionWrap::wrap(env, state_, std::move(connection));
  }
  // drainEvents() -> [[type, connection, privateData, message], ...]
  Napi::Value drain_events(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    std::deque<ConnectionEvent> events;
    {
      std::lock_guard<std::mutex> guard(state_->queue->mutex);
      events.swap(state_->queue->events);
    }
    Napi::Array out = Napi::Array::New(env, events.size());
    uint32_t i = 0;
    for (auto& event : events) {
      Napi::Array entry = Napi::Array::New(env, 4);
      entry.Set(0u, Napi::Number::New(env, u32(event.type)));
      entry.Set(1u, ConnectionWrap::wrap(env, state_, event.connection));
      entry.Set(2u, Napi::Buffer<uint8_t>::Copy(env, event.private_data.data(), event.private_data.size()));
      entry.Set(3u, Napi::String::New(env, event.message));
      out.Set(i++, entry);
    }
    return out;
  }
  Napi::Value ref(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> guard(state_->queue->mutex);
    if (state_->queue->open) state_->queue->notify.Ref(info.Env());
    return info.Env().Undefined();
  }
  Napi::Value unref(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> guard(state_->queue->mutex);
    if (state_->queue->open) state_->queue->notify.Unref(info.Env());
    return info.Env().Undefined();
  }
  Napi::Value close(const Napi::CallbackInfo& info) {
    if (!state_->closed) {
      state_->closed = true;
      state_->provider->shutdown();
      state_->queue->close();
    }
    return info.Env().Undefined();
  }
  Napi::Value device_info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    DeviceInfo d = provider(env).device_info();
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", d.name);
    o.Set("maxQpRdAtom", d.max_qp_rd_atom);
    o.Set("maxQpInitRdAtom", d.max_qp_init_rd_atom);
    o.Set("atomicCap", d.atomic_cap);
    o.Set("maxInline", d.max_inline);
    o.Set("memoryWindows", d.memory_windows);
    o.Set("memoryWindowsNote", d.memory_windows_note);
    o.Set("maxCqe", d.max_cqe);
    return o;
  }
  Napi::Value scheme(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), state_->provider->scheme()); }
  Napi::Value send_buffer(const Napi::CallbackInfo& info) {
    auto buffer = external_buffer(info.Env(), state_->send_words.data(), state_->send_words.size() * 4, state_);
    return Napi::Uint32Array::New(info.Env(), state_->send_words.size(), buffer, 0);
  }
  Napi::Value recv_buffer(const Napi::CallbackInfo& info) {
    auto buffer = external_buffer(info.Env(), state_->recv_words.data(), state_->recv_words.size() * 4, state_);
    return Napi::Uint32Array::New(info.Env(), state_->recv_words.size(), buffer, 0);
  }

  State state_;
};

}  // namespace

template <typename Wrap>
Wrap* unwrap_checked(const Napi::Value& value, Napi::FunctionReference& ctor, const char* what) {
  if (!value.IsObject() || !value.As<Napi::Object>().InstanceOf(ctor.Value())) {
    throw_error(value.Env(), "ERR_INVALID_ARG_TYPE", std::string("expected a ") + what);
  }
  return Wrap::Unwrap(value.As<Napi::Object>());
}

std::shared_ptr<Provider> provider_of(const Napi::Value& value) {
  return unwrap_checked<ProviderWrap>(value, addon(value.Env())->provider, "Provider")->provider();
}
std::shared_ptr<Connection> connection_of(const Napi::Value& value) {
  return unwrap_checked<ConnectionWrap>(value, addon(value.Env())->connection, "Connection")->connection();
}
std::shared_ptr<CompletionQueue> cq_of(const Napi::Value& value) {
  return unwrap_checked<CqWrap>(value, addon(value.Env())->cq, "Cq")->cq();
}

void write_completion(uint32_t* w, const Completion& c) {
  w[u32(WcLayout::WR_ID_LO)] = static_cast<uint32_t>(c.wr_id);
  w[u32(WcLayout::WR_ID_HI)] = static_cast<uint32_t>(c.wr_id >> 32);
  w[u32(WcLayout::STATUS)] = u32(c.status);
  w[u32(WcLayout::OPCODE)] = u32(c.opcode);
  w[u32(WcLayout::BYTE_LEN)] = c.byte_len;
  w[u32(WcLayout::IMM)] = c.imm;
  w[u32(WcLayout::FLAGS)] = c.wc_flags;
  w[u32(WcLayout::QP_NUM)] = c.qp_num;
}

void init_transport(Napi::Env env, Napi::Object exports, AddonData* data) {
  auto add = [&](const char* name, Napi::Function fn, Napi::FunctionReference& slot) {
    slot = Napi::Persistent(fn);
    exports.Set(name, fn);
  };
  add("Provider", ProviderWrap::define(env), data->provider);
  add("Memory", MemoryWrap::define(env), data->memory);
  add("MemoryRegion", MemoryRegionWrap::define(env), data->memory_region);
  add("Cq", CqWrap::define(env), data->cq);
  add("Connection", ConnectionWrap::define(env), data->connection);
  add("Listener", ListenerWrap::define(env), data->listener);
  add("Window", WindowWrap::define(env), data->window);
}

}  // namespace rkv::binding
