#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/fp16.h"
#include "common/gguf_reader.h"
#include "gtest/gtest.h"
#include "modelgen/gguf_writer.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"

namespace pagoda::common {
namespace {

using ::pagoda::modelgen::GgufWriter;

std::string AllTypesImage() {
  GgufWriter w;
  w.AddUint8("u8", 200);
  w.AddInt8("i8", -100);
  w.AddUint16("u16", 60000);
  w.AddInt16("i16", -30000);
  w.AddUint32("u32", 4000000000u);
  w.AddInt32("i32", -2000000000);
  w.AddUint64("u64", 18000000000000000000ull);
  w.AddInt64("i64", -9000000000000000000ll);
  w.AddFloat32("f32", 1.5f);
  w.AddFloat64("f64", -2.25);
  w.AddBool("yes", true);
  w.AddBool("no", false);
  w.AddString("str", "hello \xe2\x96\x81 world");
  w.AddString("empty", "");
  w.AddStringArray("strs", {"a", "", "ccc"});
  const float floats[] = {1.0f, -2.0f, 3.5f};
  w.AddFloat32Array("floats", floats);
  const int32_t ints[] = {-1, 0, 7};
  w.AddInt32Array("ints", ints);
  const uint32_t uints[] = {1, 2};
  w.AddUint32Array("uints", uints);
  const float data[6] = {1, 2, 3, 4, 5, 6};
  EXPECT_OK(w.AddFloatTensor("t.f32", {3, 2}, GgmlType::F32, data));
  EXPECT_OK(w.AddFloatTensor("t.f16", {6}, GgmlType::F16, data));
  EXPECT_OK(w.AddFloatTensor("t.bf16", {2, 3}, GgmlType::BF16, data));
  std::vector<std::byte> q4(18, std::byte{0x11});
  EXPECT_OK(w.AddTensor("t.q4", {32}, GgmlType::Q4_0, q4));
  return w.Serialize();
}

TEST(Gguf, RoundTripsEveryMetadataType) {
  auto f = GgufFile::FromBytes(AllTypesImage());
  ASSERT_OK(f);
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.GetUint("u8"), 200u);
  EXPECT_EQ(g.GetInt("i8"), -100);
  EXPECT_EQ(g.GetUint("i8"), std::nullopt);  // negative
  EXPECT_EQ(g.GetUint("u16"), 60000u);
  EXPECT_EQ(g.GetInt("i16"), -30000);
  EXPECT_EQ(g.GetUint("u32"), 4000000000u);
  EXPECT_EQ(g.GetInt("u32"), 4000000000);
  EXPECT_EQ(g.GetInt("i32"), -2000000000);
  EXPECT_EQ(g.GetUint("u64"), 18000000000000000000ull);
  EXPECT_EQ(g.GetInt("u64"), std::nullopt);  // above INT64_MAX
  EXPECT_EQ(g.GetInt("i64"), -9000000000000000000ll);
  EXPECT_EQ(g.GetFloat("f32"), 1.5);
  EXPECT_EQ(g.GetFloat("f64"), -2.25);
  EXPECT_EQ(g.GetFloat("u8"), std::nullopt);
  EXPECT_EQ(g.GetBool("yes"), true);
  EXPECT_EQ(g.GetBool("no"), false);
  EXPECT_EQ(g.GetString("str"), "hello \xe2\x96\x81 world");
  EXPECT_EQ(g.GetString("empty"), "");
  EXPECT_EQ(g.GetString("u8"), std::nullopt);
  EXPECT_EQ(g.GetString("missing"), std::nullopt);
  EXPECT_EQ(g.GetStringArray("strs"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(g.GetFloatArray("floats"), (std::vector<float>{1.0f, -2.0f, 3.5f}));
  EXPECT_EQ(g.GetInt32Array("ints"), (std::vector<int32_t>{-1, 0, 7}));
  EXPECT_EQ(g.GetInt32Array("uints"), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(g.GetInt32Array("floats"), std::nullopt);
  EXPECT_EQ(g.GetArrayLength("strs"), 3u);
  EXPECT_EQ(g.GetArrayType("strs"), GgufValueType::kString);
  EXPECT_EQ(g.GetType("i16"), GgufValueType::kInt16);
  EXPECT_EQ(g.Keys().size(), 18u);
}

TEST(Gguf, RoundTripsTensors) {
  auto f = GgufFile::FromBytes(AllTypesImage());
  ASSERT_OK(f);
  ASSERT_EQ((*f)->tensors().size(), 4u);
  const GgufTensor* t = (*f)->FindTensor("t.f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(t->type, GgmlType::F32);
  ASSERT_EQ(t->nbytes, 24u);
  float v[6];
  std::memcpy(v, t->data, 24);
  EXPECT_EQ(v[5], 6.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 32,
            reinterpret_cast<uintptr_t>((*f)->tensors()[0].data) % 32);
  const GgufTensor* h = (*f)->FindTensor("t.f16");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->nbytes, 12u);
  uint16_t bits;
  std::memcpy(&bits, h->data + 2 * 4, 2);
  EXPECT_EQ(F16ToFloat(bits), 5.0f);
  const GgufTensor* b = (*f)->FindTensor("t.bf16");
  std::memcpy(&bits, b->data + 2 * 2, 2);
  EXPECT_EQ(Bf16ToFloat(bits), 3.0f);
  const GgufTensor* q = (*f)->FindTensor("t.q4");
  EXPECT_EQ(q->type, GgmlType::Q4_0);
  EXPECT_EQ(q->nbytes, 18u);
  EXPECT_EQ(GgmlTypeName(q->type), "Q4_0");
  EXPECT_EQ((*f)->FindTensor("nope"), nullptr);
  EXPECT_EQ(((*f)->data_offset()) % 32, 0u);
}

TEST(Gguf, WriterRejectsBadTensors) {
  GgufWriter w;
  const float data[4] = {};
  EXPECT_OK(w.AddFloatTensor("a", {4}, GgmlType::F32, data));
  EXPECT_FALSE(w.AddFloatTensor("a", {4}, GgmlType::F32, data).ok());  // repeat
  EXPECT_FALSE(w.AddFloatTensor("b", {3}, GgmlType::F32, data).ok());  // size mismatch
  EXPECT_FALSE(w.AddFloatTensor("c", {0, 4}, GgmlType::F32, data).ok());
  EXPECT_FALSE(w.AddFloatTensor("d", {4}, GgmlType::Q8_0, data).ok());
}

TEST(Gguf, OpensFilesAndFingerprints) {
  const std::string dir = ::testing::TempDir();
  const std::string a = dir + "/pagoda_gguf_a.gguf", b = dir + "/pagoda_gguf_b.gguf";
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  std::vector<float> big(5000, 0.5f);
  ASSERT_OK(w.AddFloatTensor("big", {5000}, GgmlType::F32, big));
  ASSERT_OK(w.WriteFile(a));
  auto fa = GgufFile::Open(a);
  auto fa2 = GgufFile::Open(a);
  ASSERT_OK(fa);
  ASSERT_OK(fa2);
  EXPECT_EQ((*fa)->Fingerprint().size(), 16u);
  EXPECT_EQ((*fa)->Fingerprint(), (*fa2)->Fingerprint());
  // Change one weight near the end: different fingerprint.
  big[4999] = 0.25f;
  GgufWriter w2;
  w2.AddString("general.architecture", "llama");
  ASSERT_OK(w2.AddFloatTensor("big", {5000}, GgmlType::F32, big));
  ASSERT_OK(w2.WriteFile(b));
  auto fb = GgufFile::Open(b);
  ASSERT_OK(fb);
  EXPECT_NE((*fa)->Fingerprint(), (*fb)->Fingerprint());
  // Different metadata: different fingerprint.
  w2.AddString("general.name", "x");
  auto fc = GgufFile::FromBytes(w2.Serialize());
  ASSERT_OK(fc);
  EXPECT_NE((*fb)->Fingerprint(), (*fc)->Fingerprint());
  auto missing = GgufFile::Open(dir + "/pagoda_no_such_file.gguf");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

TEST(Gguf, TruncationAtEveryOffsetIsAnError) {
  const std::string image = AllTypesImage();
  for (size_t n = 0; n < image.size(); ++n) {
    auto f = GgufFile::FromBytes(image.substr(0, n));
    ASSERT_FALSE(f.ok()) << "truncated at " << n << " of " << image.size();
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  }
  auto f = GgufFile::FromBytes(image.substr(0, 30));
  EXPECT_NE(std::string(f.status().message()).find("truncated"), std::string::npos) << f.status();
}

std::string Header(uint32_t version, uint64_t tensors, uint64_t kvs) {
  std::string s = "GGUF";
  s.append(reinterpret_cast<const char*>(&version), 4);
  s.append(reinterpret_cast<const char*>(&tensors), 8);
  s.append(reinterpret_cast<const char*>(&kvs), 8);
  return s;
}

template <typename T>
void Put(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void ExpectError(const std::string& image, const std::string& needle) {
  auto f = GgufFile::FromBytes(image);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(std::string(f.status().message()).find(needle), std::string::npos) << f.status();
}

TEST(Gguf, HostileHeaders) {
  ExpectError("GGUX" + Header(3, 0, 0).substr(4), "bad magic");
  ExpectError(Header(1, 0, 0), "unsupported GGUF version 1");
  ExpectError(Header(4, 0, 0), "unsupported GGUF version 4");
  EXPECT_OK(GgufFile::FromBytes(Header(2, 0, 0)));
  ExpectError(Header(3, ~0ull, 0), "tensor count");
  ExpectError(Header(3, 0, ~0ull), "metadata count");
  // A key with an absurd length.
  std::string s = Header(3, 0, 1);
  Put<uint64_t>(&s, ~0ull);
  s += "padding-padding";
  ExpectError(s, "limit");
  // A string value with an absurd length.
  s = Header(3, 0, 1);
  Put<uint64_t>(&s, 1);
  s += "k";
  Put<uint32_t>(&s, 8);
  Put<uint64_t>(&s, 1ull << 62);
  s += "abc";
  ExpectError(s, "truncated");
  // An array with an absurd count.
  s = Header(3, 0, 1);
  Put<uint64_t>(&s, 1);
  s += "k";
  Put<uint32_t>(&s, 9);
  Put<uint32_t>(&s, 4);
  Put<uint64_t>(&s, 1ull << 61);
  ExpectError(s, "claims");
  // Nested arrays and unknown value types.
  s = Header(3, 0, 1);
  Put<uint64_t>(&s, 1);
  s += "k";
  Put<uint32_t>(&s, 9);
  Put<uint32_t>(&s, 9);
  Put<uint64_t>(&s, 0);
  ExpectError(s, "not supported");
  s = Header(3, 0, 1);
  Put<uint64_t>(&s, 1);
  s += "k";
  Put<uint32_t>(&s, 77);
  Put<uint64_t>(&s, 0);
  ExpectError(s, "unknown value type 77");
}

std::string OneTensor(uint32_t n_dims, std::vector<uint64_t> dims, uint32_t type, uint64_t offset,
                      size_t data_bytes) {
  std::string s = Header(3, 1, 0);
  Put<uint64_t>(&s, 1);
  s += "t";
  Put<uint32_t>(&s, n_dims);
  for (uint64_t d : dims) Put<uint64_t>(&s, d);
  Put<uint32_t>(&s, type);
  Put<uint64_t>(&s, offset);
  s.resize((s.size() + 31) / 32 * 32, '\0');
  s.append(data_bytes, '\0');
  return s;
}

TEST(Gguf, HostileTensorInfos) {
  EXPECT_OK(GgufFile::FromBytes(OneTensor(1, {4}, 0, 0, 16)));
  ExpectError(OneTensor(5, {1, 1, 1, 1, 1}, 0, 0, 16), "5 dimensions");
  ExpectError(OneTensor(0, {}, 0, 0, 16), "0 dimensions");
  ExpectError(OneTensor(2, {1ull << 40, 1ull << 40}, 0, 0, 16), "at most 2^50");
  ExpectError(OneTensor(1, {0}, 0, 0, 16), "dimension 0 = 0");
  ExpectError(OneTensor(1, {4}, 99, 0, 16), "unknown ggml type 99");
  ExpectError(OneTensor(1, {4}, 0, 0, 15), "ends past the end");
  ExpectError(OneTensor(1, {4}, 0, (1ull << 63) + 1, 16), "not a multiple");
  ExpectError(OneTensor(1, {4}, 0, 1ull << 62, 16), "ends past the end");
  ExpectError(OneTensor(1, {16}, 2, 0, 18), "not a multiple of the block size 32");
}

TEST(Gguf, ReadsTrainedModel) {
  PAGODA_SKIP_WITHOUT_TEST_MODELS(path, "stories260K-f32.gguf");
  auto f = GgufFile::Open(*path);
  ASSERT_OK(f);
  EXPECT_EQ((*f)->GetString("general.architecture"), "llama");
  EXPECT_EQ((*f)->GetUint("llama.embedding_length"), 64u);
  EXPECT_EQ((*f)->GetStringArray("tokenizer.ggml.tokens")->size(), 512u);
  EXPECT_EQ((*f)->GetFloatArray("tokenizer.ggml.scores")->size(), 512u);
  EXPECT_EQ((*f)->tensors().size(), 3u + 5u * 9u);
}

TEST(Fp16, F16Conversions) {
  EXPECT_EQ(FloatToF16(0.0f), 0x0000);
  EXPECT_EQ(FloatToF16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(FloatToF16(1e9f), 0x7c00);
  EXPECT_EQ(FloatToF16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToF16(0x1p-25f), 0x0000);  // tie to even -> 0
  EXPECT_EQ(FloatToF16(0x1.8p-25f), 0x0001);
  EXPECT_EQ(FloatToF16(0x1p-14f), 0x0400);                    // smallest normal
  EXPECT_EQ(FloatToF16(1.0f + 0x1p-11f), 0x3c00);             // tie, even stays
  EXPECT_EQ(FloatToF16(1.0f + 3 * 0x1p-11f), 0x3c02);         // tie, odd rounds up
  EXPECT_EQ(FloatToF16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // above tie
  EXPECT_EQ(FloatToF16(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(NAN))));
  EXPECT_EQ(F16ToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(F16ToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(F16ToFloat(0xfc00), -INFINITY);
  // Every finite half round-trips exactly.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(FloatToF16(F16ToFloat(static_cast<uint16_t>(h))), h);
  }
}

TEST(Fp16, Bf16Conversions) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3f80);             // tie, even stays
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);         // tie, odd rounds up
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // above tie
  EXPECT_EQ(FloatToBf16(-INFINITY), 0xff80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7f80) == 0x7f80) continue;
    ASSERT_EQ(FloatToBf16(Bf16ToFloat(static_cast<uint16_t>(b))), b);
  }
}

}  // namespace
}  // namespace pagoda::common
