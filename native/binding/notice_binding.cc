// NoticeDrain for JS (native/notice-drain.ts wraps it): the server's notice
// path (native/server/notice_drain.h) over one fabric's completion queue. JS
// crosses once per poll — up to NoticeOut.CAPACITY completions — and reads the
// results from two arrays this side owns (`out`: NoticeOut words; `others`: the
// completions that were not notices, WcLayout words).
#include "../server/notice_drain.h"
#include "../common/constants.generated.h"
#include "addon.h"

namespace rkv::binding {

namespace {

uint64_t number(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) throw_error(o.Env(), "ERR_INVALID_ARG_TYPE", std::string("layout.") + key + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (d < 0 || d != static_cast<double>(static_cast<uint64_t>(d))) {
    throw_error(o.Env(), "ERR_OUT_OF_RANGE", std::string("layout.") + key + " must be a non-negative integer");
  }
  return static_cast<uint64_t>(d);
}

class NoticeDrainWrap : public Napi::ObjectWrap<NoticeDrainWrap> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "NoticeDrain",
                       {InstanceMethod<&NoticeDrainWrap::attach>("attach"),
                        InstanceMethod<&NoticeDrainWrap::detach>("detach"),
                        InstanceMethod<&NoticeDrainWrap::poll>("poll"),
                        InstanceAccessor<&NoticeDrainWrap::out>("out"),
                        InstanceAccessor<&NoticeDrainWrap::others>("others")});
  }

  // new NoticeDrain(region: Buffer, layout, classes: number[], recv: Buffer, recvLkey, recvBytes, provider, cq)
  explicit NoticeDrainWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NoticeDrainWrap>(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 8 || !info[0].IsBuffer() || !info[1].IsObject() || !info[2].IsArray() || !info[3].IsBuffer() ||
        !info[4].IsNumber() || !info[5].IsNumber()) {
      throw_error(env, "ERR_INVALID_ARG_TYPE",
                  "new NoticeDrain(region: Buffer, layout, classes: number[], recv: Buffer, recvLkey, recvBytes, provider, cq)");
    }
    // The connections attached here are the provider's: it goes after them (as a client core holds it).
    provider_ = provider_of(info[6]);
    cq_ = cq_of(info[7]);
    auto region = info[0].As<Napi::Buffer<uint8_t>>();
    Napi::Object l = info[1].As<Napi::Object>();
    server::NoticeLayout layout;
    layout.region = region.Data();
    layout.region_bytes = region.Length();
    layout.heap_offset = number(l, "heapOffset");
    layout.heap_bytes = number(l, "heapBytes");
    layout.ring_offset = number(l, "ringOffset");
    layout.ring_bytes = number(l, "ringBytes");
    layout.max_clients = static_cast<uint32_t>(number(l, "maxClients"));
    if (layout.heap_offset + layout.heap_bytes > layout.region_bytes ||
        layout.ring_offset + uint64_t{layout.max_clients} * layout.ring_bytes > layout.region_bytes ||
        layout.ring_offset % 8 != 0 || layout.ring_bytes % 8 != 0 ||
        layout.ring_bytes < u32(KvLayout::RING_HEADER_BYTES) + u32(KvLayout::RING_RECORDS) * u32(KvLayout::RECORD_BYTES)) {
      throw_error(env, "ERR_OUT_OF_RANGE", "the layout's heap or rings do not fit the region");
    }
    Napi::Array classes = info[2].As<Napi::Array>();
    for (uint32_t i = 0; i < classes.Length(); i++) {
      uint32_t size = classes.Get(i).As<Napi::Number>().Uint32Value();
      if (size == 0 || (!layout.classes.empty() && size <= layout.classes.back())) {
        throw_error(env, "ERR_OUT_OF_RANGE", "size classes must be positive and ascending");
      }
      layout.classes.push_back(size);
    }
    auto recv = info[3].As<Napi::Buffer<uint8_t>>();
    server::RecvBuffers buffers;
    buffers.base = recv.Data();
    buffers.lkey = info[4].As<Napi::Number>().Uint32Value();
    buffers.bytes = info[5].As<Napi::Number>().Uint32Value();
    if (buffers.bytes == 0) throw_error(env, "ERR_OUT_OF_RANGE", "recvBytes must be positive");
    buffers.count = static_cast<uint32_t>(recv.Length() / buffers.bytes);
    region_ = Napi::Persistent(info[0].As<Napi::Object>());  // the memory stays while we read it
    recv_ = Napi::Persistent(info[3].As<Napi::Object>());
    drain_ = std::make_unique<server::NoticeDrain>(std::move(layout), buffers);
    out_ = std::make_shared<std::vector<uint32_t>>(u32(NoticeOut::WORDS));
    others_words_ = std::make_shared<std::vector<uint32_t>>(u32(NoticeOut::CAPACITY) * u32(WcLayout::WORDS));
    others_.resize(u32(NoticeOut::CAPACITY));
  }

 private:
  // attach(connection, ring): its notices are drained here from now on.
  Napi::Value attach(const Napi::CallbackInfo& info) {
    auto connection = connection_of(info[0]);
    if (!info[1].IsNumber()) throw_error(info.Env(), "ERR_INVALID_ARG_TYPE", "attach(connection, ring: number)");
    uint32_t qp = connection->qp_num();
    drain_->attach(qp, info[1].As<Napi::Number>().Uint32Value(), std::move(connection));
    return info.Env().Undefined();
  }
  // detach(qpNum): its completions go to JS untouched (a departed client's flushes).
  Napi::Value detach(const Napi::CallbackInfo& info) {
    if (!info[0].IsNumber()) throw_error(info.Env(), "ERR_INVALID_ARG_TYPE", "detach(qpNum: number)");
    drain_->detach(info[0].As<Napi::Number>().Uint32Value());
    return info.Env().Undefined();
  }
  // poll(max, chunkStart, granted) -> completions taken from the CQ; results in out and others.
  Napi::Value poll(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsTypedArray() || !info[2].IsTypedArray()) {
      throw_error(env, "ERR_INVALID_ARG_TYPE", "poll(max: number, chunkStart: Uint32Array, granted: Uint32Array)");
    }
    auto chunk_start = info[1].As<Napi::TypedArray>();
    auto granted = info[2].As<Napi::TypedArray>();
    if (chunk_start.TypedArrayType() != napi_uint32_array || granted.TypedArrayType() != napi_uint32_array ||
        chunk_start.ElementLength() < drain_->bitmap_words() || granted.ElementLength() < drain_->bitmap_words()) {
      throw_error(env, "ERR_OUT_OF_RANGE", "the heap's bitmaps must be Uint32Arrays of one bit per heap unit");
    }
    drain_->set_bitmaps(chunk_start.As<Napi::Uint32Array>().Data(), granted.As<Napi::Uint32Array>().Data());
    uint32_t max = info[0].As<Napi::Number>().Uint32Value();
    uint32_t taken = drain_->poll(*cq_, max, out_->data(), others_.data());
    uint32_t n = (*out_)[u32(NoticeOut::OTHERS)];
    for (uint32_t i = 0; i < n; i++) write_completion(others_words_->data() + i * u32(WcLayout::WORDS), others_[i]);
    return Napi::Number::New(env, taken);
  }
  Napi::Value out(const Napi::CallbackInfo& info) { return words_view(info.Env(), out_); }
  Napi::Value others(const Napi::CallbackInfo& info) { return words_view(info.Env(), others_words_); }

  std::shared_ptr<transport::Provider> provider_;  // declared first: destroyed after drain_'s connections
  std::shared_ptr<transport::CompletionQueue> cq_;
  Napi::ObjectReference region_;
  Napi::ObjectReference recv_;
  std::unique_ptr<server::NoticeDrain> drain_;
  std::shared_ptr<std::vector<uint32_t>> out_;
  std::shared_ptr<std::vector<uint32_t>> others_words_;
  std::vector<transport::Completion> others_;
};

}  // namespace

void init_notice(Napi::Env env, Napi::Object exports) {
  exports.Set("NoticeDrain", NoticeDrainWrap::define(env));
}

}  // namespace rkv::binding
