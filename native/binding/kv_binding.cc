// JS class over the client core: ClientCore(provider, connection, cq, region, options),
// whose connection is its connection 0; addConnection(provider, connection,
// region) adds another of the same provider, on the same CQ (a cluster's
// members), and each op names its connection (OpLayout.CONNECTION).
//
// One crossing per batch: JS writes op descriptors (OpLayout words) into
// opWords and keys/values into arena, then submit(n), which also runs the
// core's passes and leaves the results of every op that finished inside it
// in resultWords (ResultLayout words), with GET values in scratch (valid
// until the next submit or poll), and the completions of JS's control
// requests in controlWords (ControlWords: a count, then WcLayout words).
// poll() does the same for ops that finish later. On shm a GET is one
// crossing. close() ends
// the data path: every op in flight fails with DISCONNECTED (poll() hands
// those results out) and it returns once the NIC or provider can no longer
// write scratch.
//
// Ownership: the wrapper and every scratch view JS holds share the core, so
// its scratch is freed only when the last of them goes; the wrapper closes
// the core when it is collected, if JS did not.
#include <cstring>
#include <iterator>
#include <mutex>
#include <unordered_map>

#include "../kv/client_core.h"
#include "addon.h"

namespace rkv::binding {

namespace {

using kv::ClientCore;
using kv::OpDesc;
using kv::OpResult;
using kv::RegionInfo;

constexpr size_t kMaxBatch = u32(Limit::MAX_POST_BATCH);
constexpr size_t kMaxControls = u32(Limit::MAX_POLL_BATCH);

uint64_t join64(uint32_t lo, uint32_t hi) { return static_cast<uint64_t>(hi) << 32 | lo; }

uint64_t bigint_field(const Napi::Object& o, const char* name) {
  Napi::Value v = o.Get(name);
  if (v.IsBigInt()) {
    bool lossless = true;
    return v.As<Napi::BigInt>().Uint64Value(&lossless);
  }
  if (v.IsNumber()) return static_cast<uint64_t>(v.As<Napi::Number>().Int64Value());
  throw_error(o.Env(), "ERR_INVALID_ARG_TYPE", std::string("region.") + name + " must be a number or bigint");
}

// Registered buffers (client/large-values.ts): memory the caller's large
// values live in, by id. An id is never reused; freeRegistered() forgets it,
// so an op that names it later fails with BAD_BUFFER (the memory itself stays
// mapped while a JS view of it lives). Each core registers a buffer with its
// own provider the first time an op names it. Shared by every thread's addon.
std::mutex registered_mutex;
std::unordered_map<uint32_t, std::shared_ptr<transport::Memory>> registered;
uint32_t registered_next = 1;

std::shared_ptr<transport::Memory> registered_find(uint32_t id) {
  std::lock_guard<std::mutex> lock(registered_mutex);
  auto it = registered.find(id);
  return it == registered.end() ? nullptr : it->second;
}

// registeredBuffer(bytes) -> [id, ArrayBuffer over the memory]
Napi::Value registered_buffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const double bytes = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : -1;
  if (!(bytes >= 1 && bytes <= 4294967295.0)) throw_error(env, "ERR_OUT_OF_RANGE", "a registered buffer is 1 byte to 4 GiB");
  std::string error;
  std::shared_ptr<transport::Memory> memory = transport::Memory::allocate(static_cast<size_t>(bytes), "", &error);
  if (!memory) throw_error(env, "ERR_RKV_MEMORY", error);
  uint32_t id;
  {
    std::lock_guard<std::mutex> lock(registered_mutex);
    id = registered_next++;
    registered[id] = memory;
  }
  auto* holder = new std::shared_ptr<transport::Memory>(memory);
  Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(
      env, memory->data(), static_cast<size_t>(bytes),
      [](Napi::Env, void*, std::shared_ptr<transport::Memory>* p) { delete p; }, holder);
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, Napi::Number::New(env, id));
  out.Set(1u, buffer);
  return out;
}

// freeRegistered(id) -> whether it was registered
Napi::Value free_registered(const Napi::CallbackInfo& info) {
  const uint32_t id = info[0].As<Napi::Number>().Uint32Value();
  std::lock_guard<std::mutex> lock(registered_mutex);
  return Napi::Boolean::New(info.Env(), registered.erase(id) > 0);
}

// The server's region as the session's hello described it (CoreRegion).
RegionInfo region_of(const Napi::Object& r) {
  RegionInfo region;
  region.addr = bigint_field(r, "addr");
  region.rkey = static_cast<uint32_t>(bigint_field(r, "rkey"));
  region.length = bigint_field(r, "length");
  region.bucket_count = static_cast<uint32_t>(bigint_field(r, "bucketCount"));
  region.index_offset = bigint_field(r, "indexOffset");
  region.heap_offset = bigint_field(r, "heapOffset");
  region.heap_bytes = bigint_field(r, "heapBytes");
  region.seed = bigint_field(r, "seed");
  region.ring_offset = bigint_field(r, "ringOffset");
  region.client_id = static_cast<uint32_t>(bigint_field(r, "clientId"));
  region.version_base = bigint_field(r, "versionBase");
  region.max_value = static_cast<uint32_t>(bigint_field(r, "maxValueBytes"));
  region.grace_ms = static_cast<uint32_t>(bigint_field(r, "graceMs"));
  // Absent unless the server evicts (its hello's region carries it).
  if (r.Has("accessOffset") && !r.Get("accessOffset").IsUndefined()) region.access_offset = bigint_field(r, "accessOffset");
  // Absent for a region without an epoch table (format 3 or 4) and for read clients.
  if (r.Has("epochOffset") && !r.Get("epochOffset").IsUndefined()) region.epoch_offset = bigint_field(r, "epochOffset");
  return region;
}

class ClientCoreWrap : public Napi::ObjectWrap<ClientCoreWrap> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "ClientCore",
                       {InstanceMethod<&ClientCoreWrap::submit>("submit"),
                        InstanceMethod<&ClientCoreWrap::poll>("poll"),
                        InstanceMethod<&ClientCoreWrap::fail_all>("failAll"),
                        InstanceMethod<&ClientCoreWrap::close>("close"),
                        InstanceMethod<&ClientCoreWrap::add_connection>("addConnection"),
                        InstanceMethod<&ClientCoreWrap::close_connection>("closeConnection"),
                        InstanceMethod<&ClientCoreWrap::connection_item_limit>("connectionItemLimit"),
                        InstanceMethod<&ClientCoreWrap::permit_reads>("permitReads"),
                        InstanceMethod<&ClientCoreWrap::copy_values>("copyValues"),
                        InstanceAccessor<&ClientCoreWrap::connections>("connections"),
                        InstanceMethod<&ClientCoreWrap::location_stats>("locationStats"),
                        InstanceAccessor<&ClientCoreWrap::inflight>("inflight"),
                        InstanceAccessor<&ClientCoreWrap::doorbells>("doorbells"),
                        InstanceAccessor<&ClientCoreWrap::backoffs>("backoffs"),
                        InstanceAccessor<&ClientCoreWrap::item_limit>("itemLimit"),
                        InstanceAccessor<&ClientCoreWrap::op_words>("opWords"),
                        InstanceAccessor<&ClientCoreWrap::result_words>("resultWords"),
                        InstanceAccessor<&ClientCoreWrap::copy_words>("copyWords"),
                        InstanceAccessor<&ClientCoreWrap::handle>("handle"),
                        InstanceAccessor<&ClientCoreWrap::control_words>("controlWords"),
                        InstanceAccessor<&ClientCoreWrap::arena>("arena"),
                        InstanceAccessor<&ClientCoreWrap::scratch>("scratch")});
  }

  explicit ClientCoreWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ClientCoreWrap>(info) {
    Napi::Env env = info.Env();
    if (!info[3].IsObject() || !info[4].IsObject()) {
      throw_error(env, "ERR_INVALID_ARG_TYPE", "new ClientCore(provider, connection, cq, region, options)");
    }
    const RegionInfo region = region_of(info[3].As<Napi::Object>());
    Napi::Object o = info[4].As<Napi::Object>();
    const size_t scratch_bytes = static_cast<size_t>(bigint_field(o, "scratchBytes"));
    const uint32_t timeout = static_cast<uint32_t>(bigint_field(o, "opTimeoutMs"));
    arena_bytes_ = static_cast<size_t>(bigint_field(o, "arenaBytes"));
    const bool arm_when_done = o.Get("armWhenDone").ToBoolean();
    const size_t locations = o.Has("locationCacheEntries") && !o.Get("locationCacheEntries").IsUndefined()
                                 ? static_cast<size_t>(bigint_field(o, "locationCacheEntries"))
                                 : ClientCore::kDefaultLocationEntries;
    if (locations > (1u << 24)) throw_error(env, "ERR_OUT_OF_RANGE", "locationCacheEntries is at most 2^24");
    std::string error;
    provider_ = provider_of(info[0]);
    core_ = ClientCore::create(provider_, connection_of(info[1]), cq_of(info[2]), region, scratch_bytes,
                               timeout, &error, locations);
    if (!core_) throw_error(env, "ERR_RKV_CLIENT", error);
    core_->set_arm_when_done(arm_when_done);
    op_words_ = std::make_shared<std::vector<uint32_t>>(kMaxBatch * u32(OpLayout::WORDS));
    result_words_ = std::make_shared<std::vector<uint32_t>>(kMaxBatch * u32(ResultLayout::WORDS));
    copy_words_ = std::make_shared<std::vector<uint32_t>>(kMaxBatch * u32(CopyLayout::WORDS));
    control_words_ = std::make_shared<std::vector<uint32_t>>(u32(ControlWords::ENTRIES) +
                                                             kMaxControls * u32(WcLayout::WORDS));
    arena_ = std::make_shared<std::vector<uint8_t>>(arena_bytes_);
    descs_.resize(kMaxBatch);
    results_.resize(kMaxBatch);
    controls_.resize(kMaxControls);
    handle_ = register_handle(this);
  }
  ~ClientCoreWrap() override {
    unregister_handle(handle_);
    if (core_) core_->close();
  }

  // The hot calls as module functions of a handle (coreSubmit(handle, count), corePoll(handle),
  // coreCopyValues(handle, target, first, count)): an instance method's napi_unwrap is a
  // private-symbol lookup in V8's runtime, ~50 ns of a ~115-150 ns call. A handle
  // is a slot of this thread's table and the slot's generation, so a stale one never names a
  // later core; the JS wrapper holds its native object, so its own handle stays live.
  static Napi::Value submit_of(const Napi::CallbackInfo& info) { return of(info).submit_at(info, 1); }
  static Napi::Value poll_of(const Napi::CallbackInfo& info) { return of(info).poll(info); }
  static Napi::Value copy_values_of(const Napi::CallbackInfo& info) { return of(info).copy_values_at(info, 1); }

 private:
  static constexpr uint32_t kSlotBits = 20;  // a handle: generation << kSlotBits | slot
  struct Slot {
    ClientCoreWrap* wrap = nullptr;
    uint32_t generation = 0;
  };
  static inline thread_local std::vector<Slot> slots_;  // the cores of this thread's addon

  static double register_handle(ClientCoreWrap* wrap) {
    size_t slot = 0;
    while (slot < slots_.size() && slots_[slot].wrap != nullptr) slot++;
    if (slot == (size_t{1} << kSlotBits)) return -1;  // a million live cores: calls by handle refuse
    if (slot == slots_.size()) slots_.emplace_back();
    Slot& s = slots_[slot];
    s.wrap = wrap;
    s.generation++;
    return static_cast<double>(s.generation) * (1u << kSlotBits) + static_cast<double>(slot);
  }
  static void unregister_handle(double handle) {
    if (handle < 0) return;
    const auto slot = static_cast<size_t>(static_cast<uint64_t>(handle) & ((1u << kSlotBits) - 1));
    if (slot < slots_.size()) slots_[slot].wrap = nullptr;
  }
  // By the table the function was made with (the init thread's: a TLS lookup per call costs more).
  static ClientCoreWrap& of(const Napi::CallbackInfo& info) {
    const std::vector<Slot>& slots = *static_cast<const std::vector<Slot>*>(info.Data());
    const double h = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : -1;
    const auto bits = h >= 0 && h < 9007199254740992.0 ? static_cast<uint64_t>(h) : ~uint64_t{0};
    const size_t slot = bits & ((1u << kSlotBits) - 1);
    if (static_cast<double>(bits) != h || slot >= slots.size() || slots[slot].wrap == nullptr ||
        slots[slot].generation != (bits >> kSlotBits)) {
      throw_error(info.Env(), "ERR_INVALID_STATE", "no client core has this handle (its core is gone, or it is of another thread)");
    }
    return *slots[slot].wrap;
  }

 public:
  static void define_by_handle(Napi::Env env, Napi::Object exports) {
    exports.Set("coreSubmit", Napi::Function::New(env, submit_of, "coreSubmit", &slots_));
    exports.Set("corePoll", Napi::Function::New(env, poll_of, "corePoll", &slots_));
    exports.Set("coreCopyValues", Napi::Function::New(env, copy_values_of, "coreCopyValues", &slots_));
  }

 private:
  Napi::Value handle(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), handle_); }

  // submit(count) -> taken + results * 65536: how many ops were taken (the
  // rest stay with the caller), and how many results it left in resultWords
  // (both at most MAX_POST_BATCH); control completions are in controlWords.
  Napi::Value submit(const Napi::CallbackInfo& info) { return submit_at(info, 0); }
  // The calls' bodies, their arguments from info[first] (0: the method; 1: the handle's function).
  Napi::Value submit_at(const Napi::CallbackInfo& info, size_t first) {
    Napi::Env env = info.Env();
    const uint32_t count = std::min<uint32_t>(info[first].As<Napi::Number>().Uint32Value(), kMaxBatch);
    uint32_t* w = op_words_->data();
    const uint8_t* arena = arena_->data();
    for (uint32_t i = 0; i < count; i++, w += u32(OpLayout::WORDS)) {
      OpDesc& d = descs_[i];
      const uint32_t flags = w[u32(OpLayout::TYPE)] >> u32(OpLayout::TYPE_FLAGS_SHIFT);
      d.type = static_cast<KvOp>(w[u32(OpLayout::TYPE)] & ((1u << u32(OpLayout::TYPE_FLAGS_SHIFT)) - 1));
      d.keep_version = (flags & u32(OpFlag::KEEP_VERSION)) != 0;
      d.id = w[u32(OpLayout::ID)];
      d.connection = w[u32(OpLayout::CONNECTION)];  // no such connection: the op fails with PROTOCOL
      const uint64_t ko = w[u32(OpLayout::KEY_OFFSET)], kl = w[u32(OpLayout::KEY_LEN)];
      const uint64_t vo = w[u32(OpLayout::VALUE_OFFSET)], vl = w[u32(OpLayout::VALUE_LEN)];
      if (ko + kl > arena_bytes_ || vo + vl > arena_bytes_) {
        throw_error(env, "ERR_OUT_OF_RANGE", "op " + std::to_string(i) + " reaches past the arena");
      }
      d.key = arena + ko;
      d.key_len = static_cast<uint32_t>(kl);
      d.value = arena + vo;
      d.value_len = static_cast<uint32_t>(vl);
      d.block = w[u32(OpLayout::BLOCK)];
      d.block_units = w[u32(OpLayout::BLOCK_UNITS)];
      d.epoch = w[u32(OpLayout::EPOCH)];
      d.backups = w[u32(OpLayout::BACKUPS)];  // more than MAX_BACKUPS: the op fails with PROTOCOL
      for (uint32_t b = 0; b < std::min(d.backups, u32(OpLayout::MAX_BACKUPS)); b++) {
        const uint32_t* bw = w + u32(OpLayout::BACKUP_0) + b * u32(OpLayout::BACKUP_WORDS);
        d.backup[b] = {bw[u32(OpLayout::BACKUP_CONNECTION)], bw[u32(OpLayout::BACKUP_BLOCK)],
                       bw[u32(OpLayout::BACKUP_BLOCK_UNITS)]};
      }
      read_argument(d, w);
      read_external(d, w);
    }
    const size_t taken = core_->submit(descs_.data(), count);
    // An op that does not name a buffer, an epoch or backups leaves these words alone: clear them.
    w = op_words_->data();
    for (uint32_t i = 0; i < count; i++, w += u32(OpLayout::WORDS)) {
      w[u32(OpLayout::EXT_BUFFER)] = w[u32(OpLayout::EPOCH)] = w[u32(OpLayout::BACKUPS)] = 0;
    }
    const size_t n = write_out(core_->take_results(results_.data(), kMaxBatch));
    return Napi::Number::New(env, static_cast<double>(taken + n * 65536));
  }

  // poll() -> how many op results it left in resultWords; the control
  // completions it took are in controlWords, their count first.
  Napi::Value poll(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(write_out(core_->poll(results_.data(), kMaxBatch))));
  }

  // The results in results_ into resultWords, and the control completions
  // waiting into controlWords. Returns n.
  size_t write_out(size_t n) {
    uint32_t* w = result_words_->data();
    for (size_t i = 0; i < n; i++, w += u32(ResultLayout::WORDS)) {
      const OpResult& r = results_[i];
      w[u32(ResultLayout::ID)] = r.id;
      w[u32(ResultLayout::STATUS)] = u32(r.status);
      w[u32(ResultLayout::VALUE_OFFSET)] = static_cast<uint32_t>(r.value_offset);
      w[u32(ResultLayout::VALUE_LEN)] = r.value_len;
      w[u32(ResultLayout::VERSION_LO)] = static_cast<uint32_t>(r.version);
      w[u32(ResultLayout::VERSION_HI)] = static_cast<uint32_t>(r.version >> 32);
      w[u32(ResultLayout::DETAIL)] = r.detail;
      w[u32(ResultLayout::BLOCK_UNUSED)] = r.block_unused ? 1 : 0;
      w[u32(ResultLayout::BACKUP_BLOCKS_UNUSED)] = r.backup_blocks_unused;
      w[u32(ResultLayout::EXPIRY_LO)] = static_cast<uint32_t>(r.expiry);
      w[u32(ResultLayout::EXPIRY_HI)] = static_cast<uint32_t>(r.expiry >> 32);
    }
    uint32_t* c = control_words_->data();
    const size_t controls = core_->take_controls(controls_.data(), kMaxControls);
    c[u32(ControlWords::COUNT)] = static_cast<uint32_t>(controls);
    for (size_t i = 0; i < controls; i++) {
      write_completion(c + u32(ControlWords::ENTRIES) + i * u32(WcLayout::WORDS), controls_[i]);
    }
    return n;
  }

  // The argument of the op's type, from OpLayout's words of its name.
  static void read_argument(OpDesc& d, const uint32_t* w) {
    switch (d.type) {
      case KvOp::CAS:
        d.expected_version = join64(w[u32(OpLayout::EXPECTED_VERSION_LO)], w[u32(OpLayout::EXPECTED_VERSION_HI)]);
        break;
      case KvOp::INCR: d.delta = join64(w[u32(OpLayout::DELTA_LO)], w[u32(OpLayout::DELTA_HI)]); break;
      case KvOp::LOCK: d.lock_timeout_ms = w[u32(OpLayout::LOCK_TIMEOUT_MS)]; break;
      case KvOp::UNLOCK: d.token = w[u32(OpLayout::TOKEN)]; break;
      default: d.expected_version = 0; break;
    }
    d.lock_floor = d.type == KvOp::LOCK ? w[u32(OpLayout::LOCK_FLOOR)] : 0;
    // The new item's expiry: PUT and CAS write items (JS writes these words for them).
    const bool writes = d.type == KvOp::PUT || d.type == KvOp::CAS;
    d.expiry = writes ? join64(w[u32(OpLayout::EXPIRY_LO)], w[u32(OpLayout::EXPIRY_HI)]) : 0;
  }

  // The op's registered buffer (OpLayout EXT_*), registered with this core's
  // provider on first use. Gone or out of range: ext_bad (BAD_BUFFER).
  void read_external(OpDesc& d, const uint32_t* w) {
    d.ext = nullptr;
    d.ext_len = d.ext_lkey = 0;
    d.ext_bad = false;
    const uint32_t id = w[u32(OpLayout::EXT_BUFFER)];
    if (id == 0) return;
    const uint64_t offset = w[u32(OpLayout::EXT_OFFSET)], len = w[u32(OpLayout::EXT_LEN)];
    std::shared_ptr<transport::Memory> memory = registered_find(id);
    auto cached = external_.find(id);
    if (!memory) {
      if (cached != external_.end()) external_.erase(cached);
      d.ext_bad = true;
      return;
    }
    if (cached == external_.end()) {
      // A new buffer: first drop the registrations of buffers freed since (their
      // memory goes with the last JS view), so a client that allocates and frees
      // buffers keeps registered only those still allocated, plus this one.
      for (auto it = external_.begin(); it != external_.end();) {
        it = registered_find(it->first) ? std::next(it) : external_.erase(it);
      }
      std::string error;
      std::unique_ptr<transport::MemoryRegion> mr =
          provider_->register_memory(*memory, 0, memory->length(), u32(Access::LOCAL_WRITE), &error);
      if (!mr) {
        d.ext_bad = true;
        return;
      }
      cached = external_.emplace(id, External{memory, std::move(mr)}).first;
    }
    if (offset + len > memory->length() || (len == 0 && d.type != KvOp::GET)) {
      d.ext_bad = true;
      return;
    }
    d.ext = memory->data() + offset;
    d.ext_len = static_cast<uint32_t>(len);
    d.ext_lkey = cached->second.mr->lkey();
    if (d.type == KvOp::PUT || d.type == KvOp::CAS) {
      d.value = d.ext;
      d.value_len = d.ext_len;
    }
  }
  Napi::Value item_limit(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(core_->item_limit()));
  }
  // failAll(status[, connection]): every op, or the ops of one connection.
  Napi::Value fail_all(const Napi::CallbackInfo& info) {
    const auto status = static_cast<KvStatus>(info[0].As<Napi::Number>().Uint32Value());
    if (info[1].IsNumber()) {
      core_->fail_connection(info[1].As<Napi::Number>().Uint32Value(), status, 0);
    } else {
      core_->fail_all(status, 0);
    }
    return info.Env().Undefined();
  }
  // addConnection(provider, connection, region) -> its index. The connection
  // must be of the core's provider and complete on the core's CQ.
  Napi::Value add_connection(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[2].IsObject()) throw_error(env, "ERR_INVALID_ARG_TYPE", "addConnection(provider, connection, region)");
    if (provider_of(info[0]) != provider_) throw_error(env, "ERR_INVALID_ARG_VALUE", "the connection is of another provider than the core's");
    std::string error;
    const int index = core_->add_connection(connection_of(info[1]), region_of(info[2].As<Napi::Object>()), &error);
    if (index < 0) throw_error(env, "ERR_RKV_CLIENT", error);
    return Napi::Number::New(env, index);
  }
  // closeConnection(index[, waitMs]) -> whether its requests are all done (its index is free again).
  Napi::Value close_connection(const Napi::CallbackInfo& info) {
    const uint32_t index = info[0].As<Napi::Number>().Uint32Value();
    const uint32_t wait = info[1].IsNumber() ? info[1].As<Napi::Number>().Uint32Value() : ClientCore::kCloseWaitMs;
    return Napi::Boolean::New(info.Env(), core_->close_connection(index, wait));
  }
  Napi::Value connection_item_limit(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(core_->item_limit(info[0].As<Napi::Number>().Uint32Value())));
  }
  // permitReads(index, ms): the connection's read lease ends `ms` from now (client_core.h).
  Napi::Value permit_reads(const Napi::CallbackInfo& info) {
    core_->permit_reads(info[0].As<Napi::Number>().Uint32Value(), info[1].As<Napi::Number>().Int64Value());
    return info.Env().Undefined();
  }
  Napi::Value connections(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), core_->connections());
  }
  // close([waitMs]) -> whether every request the core posted has completed or
  // been flushed (false: its scratch stays mapped for good).
  Napi::Value close(const Napi::CallbackInfo& info) {
    const uint32_t wait = info[0].IsNumber() ? info[0].As<Napi::Number>().Uint32Value() : ClientCore::kCloseWaitMs;
    return Napi::Boolean::New(info.Env(), core_->close(wait));
  }
  // locationStats() -> [hits, misses, validation failures] of the location
  // cache since the core was made (read on demand: stats, metrics).
  Napi::Value location_stats(const Napi::CallbackInfo& info) {
    const kv::LocationCache::Stats s = core_->location_stats();
    Napi::Array a = Napi::Array::New(info.Env(), 3);
    a.Set(0u, static_cast<double>(s.hits));
    a.Set(1u, static_cast<double>(s.misses));
    a.Set(2u, static_cast<double>(s.failures));
    return a;
  }
  Napi::Value backoffs(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(core_->backoffs()));
  }
  Napi::Value doorbells(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(core_->doorbells()));
  }
  Napi::Value inflight(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(core_->inflight()));
  }
  Napi::Value op_words(const Napi::CallbackInfo& info) { return words_view(info.Env(), op_words_); }
  Napi::Value result_words(const Napi::CallbackInfo& info) { return words_view(info.Env(), result_words_); }
  Napi::Value control_words(const Napi::CallbackInfo& info) { return words_view(info.Env(), control_words_); }
  Napi::Value copy_words(const Napi::CallbackInfo& info) { return words_view(info.Env(), copy_words_); }
  Napi::Value arena(const Napi::CallbackInfo& info) {
    return Napi::Buffer<uint8_t>::New(info.Env(), arena_->data(), arena_->size(),
                                      [](Napi::Env, uint8_t*, std::shared_ptr<std::vector<uint8_t>>* p) { delete p; },
                                      new std::shared_ptr<std::vector<uint8_t>>(arena_));
  }
  // copyValues(target, first, count): CopyLayout entries [first, first + count) of copyWords,
  // each scratch[AT, AT + LENGTH) to target[TARGET_START...]: the GET values of a hand-out
  // leave scratch in a call per target, not one per value. The target is a Buffer or an
  // ArrayBuffer (the pool of the Buffers Buffer.allocUnsafe cut from it). Every range is
  // checked before anything is copied.
  Napi::Value copy_values(const Napi::CallbackInfo& info) { return copy_values_at(info, 0); }
  Napi::Value copy_values_at(const Napi::CallbackInfo& info, size_t arg) {
    Napi::Env env = info.Env();
    const bool typed = info[arg].IsTypedArray();
    if ((!typed && !info[arg].IsArrayBuffer()) || !info[arg + 1].IsNumber() || !info[arg + 2].IsNumber()) {
      throw_error(env, "ERR_INVALID_ARG_TYPE", "copyValues(target: Buffer | ArrayBuffer, first: number, count: number)");
    }
    uint8_t* target_data;
    uint64_t target_length;
    if (typed) {
      auto target = info[arg].As<Napi::Uint8Array>();
      target_data = target.Data();
      target_length = target.ByteLength();
    } else {
      auto target = info[arg].As<Napi::ArrayBuffer>();
      target_data = static_cast<uint8_t*>(target.Data());
      target_length = target.ByteLength();
    }
    const int64_t first = info[arg + 1].As<Napi::Number>().Int64Value();
    const int64_t count = info[arg + 2].As<Napi::Number>().Int64Value();
    if (first < 0 || count < 0 || first > static_cast<int64_t>(kMaxBatch) || count > static_cast<int64_t>(kMaxBatch) - first) {
      throw_error(env, "ERR_OUT_OF_RANGE", "copyValues: [first, first + count) is not inside copyWords' entries");
    }
    const uint64_t scratch_length = core_->scratch_length();
    const uint32_t* begin = copy_words_->data() + first * u32(CopyLayout::WORDS);
    const uint32_t* end = begin + count * u32(CopyLayout::WORDS);
    for (const uint32_t* w = begin; w < end; w += u32(CopyLayout::WORDS)) {
      const uint64_t at = w[u32(CopyLayout::AT)], length = w[u32(CopyLayout::LENGTH)];
      const uint64_t target_start = w[u32(CopyLayout::TARGET_START)];
      if (at + length > scratch_length || target_start + length > target_length) {
        throw_error(env, "ERR_OUT_OF_RANGE", "copyValues: a range is not inside scratch, or does not fit the target");
      }
    }
    for (const uint32_t* w = begin; w < end; w += u32(CopyLayout::WORDS)) {
      std::memcpy(target_data + w[u32(CopyLayout::TARGET_START)], core_->scratch() + w[u32(CopyLayout::AT)],
                  w[u32(CopyLayout::LENGTH)]);
    }
    return env.Undefined();
  }

  // The core's scratch memory: the view shares the core, so it never outlives it.
  Napi::Value scratch(const Napi::CallbackInfo& info) {
    return Napi::Buffer<uint8_t>::New(info.Env(), core_->scratch(), core_->scratch_length(),
                                      [](Napi::Env, uint8_t*, std::shared_ptr<ClientCore>* p) { delete p; },
                                      new std::shared_ptr<ClientCore>(core_));
  }

  struct External {
    std::shared_ptr<transport::Memory> memory;
    std::unique_ptr<transport::MemoryRegion> mr;
  };
  std::shared_ptr<transport::Provider> provider_;  // before external_: registrations go first
  std::unordered_map<uint32_t, External> external_;  // registered buffers, registered here
  std::shared_ptr<ClientCore> core_;
  std::shared_ptr<std::vector<uint32_t>> op_words_, result_words_, control_words_, copy_words_;
  std::shared_ptr<std::vector<uint8_t>> arena_;
  size_t arena_bytes_ = 0;
  double handle_ = -1;
  std::vector<OpDesc> descs_;
  std::vector<OpResult> results_;
  std::vector<transport::Completion> controls_;
};

}  // namespace

void init_kv(Napi::Env env, Napi::Object exports, AddonData* data) {
  Napi::Function fn = ClientCoreWrap::define(env);
  data->client_core = Napi::Persistent(fn);
  exports.Set("ClientCore", fn);
  ClientCoreWrap::define_by_handle(env, exports);
  exports.Set("registeredBuffer", Napi::Function::New(env, registered_buffer, "registeredBuffer"));
  exports.Set("freeRegistered", Napi::Function::New(env, free_registered, "freeRegistered"));
}

}  // namespace rkv::binding
