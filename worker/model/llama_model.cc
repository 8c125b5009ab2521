#include "worker/model/llama_model.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fp16.h"
#include "common/status_macros.h"

namespace pagoda::worker {
namespace {

using common::GgmlType;
using common::GgufFile;
using common::GgufTensor;

// Converts a tensor's elements to float32.
absl::StatusOr<std::vector<float>> ToFloat(const GgufTensor& t) {
  const size_t n = static_cast<size_t>(t.num_elements());
  std::vector<float> out(n);
  switch (t.type) {
    case GgmlType::F32:
      std::memcpy(out.data(), t.data, n * sizeof(float));
      return out;
    case GgmlType::F16:
    case GgmlType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = t.type == GgmlType::F16 ? common::F16ToFloat(h) : common::Bf16ToFloat(h);
      }
      return out;
    default:
      return absl::UnimplementedError(absl::StrCat("tensor '", t.name, "' has type ",
                                                   common::GgmlTypeName(t.type),
                                                   "; supported: F32, F16, BF16"));
  }
}

// Loads `name`, requiring GGUF dims exactly `dims` (innermost first).
absl::StatusOr<std::vector<float>> LoadTensor(const GgufFile& file, const std::string& name,
                                              const std::vector<int64_t>& dims) {
  const GgufTensor* t = file.FindTensor(name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("model is missing tensor '", name, "'"));
  }
  if (t->dims != dims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has dims [", absl::StrJoin(t->dims, ", "),
                     "], expected [", absl::StrJoin(dims, ", "), "] from the model config"));
  }
  return ToFloat(*t);
}

// LoadTensor on `file`, for the architecture hooks (architecture.h).
TensorLoader LoaderFor(const GgufFile& file) {
  return [&file](const std::string& name, const std::vector<int64_t>& dims) {
    return LoadTensor(file, name, dims);
  };
}

}  // namespace

absl::StatusOr<std::shared_ptr<const LlamaModel>> LlamaModel::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  auto model = Load(*file);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("'", path, "': ", model.status().message()));
  }
  return model;
}

absl::StatusOr<std::shared_ptr<const LlamaModel>> LlamaModel::Load(const GgufFile& file) {
  std::shared_ptr<LlamaModel> m(new LlamaModel());
  ASSIGN_OR_RETURN(m->config_, common::ReadModelConfig(file));
  m->fingerprint_ = file.Fingerprint();
  const common::ModelConfig& c = m->config_;
  ASSIGN_OR_RETURN(m->token_embd_, LoadTensor(file, "token_embd.weight", {c.dim, c.vocab_size}));
  ASSIGN_OR_RETURN(m->output_norm_, LoadTensor(file, "output_norm.weight", {c.dim}));
  m->tied_output_ = file.FindTensor("output.weight") == nullptr;
  if (!m->tied_output_) {
    ASSIGN_OR_RETURN(m->output_, LoadTensor(file, "output.weight", {c.dim, c.vocab_size}));
  }
  ASSIGN_OR_RETURN(m->rope_inv_freq_, RopeInvFrequencies(file, LoaderFor(file), c));
  m->layers_.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) RETURN_IF_ERROR(m->LoadLayer(file, l));
  return std::shared_ptr<const LlamaModel>(std::move(m));
}

absl::Status LlamaModel::LoadLayer(const GgufFile& file, int index) {
  const common::ModelConfig& c = config_;
  const std::string p = absl::StrCat("blk.", index, ".");
  const int64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.ffn_dim;
  LlamaLayerWeights& w = layers_[static_cast<size_t>(index)];
  ASSIGN_OR_RETURN(w.attn_norm, LoadTensor(file, p + "attn_norm.weight", {dim}));
  ASSIGN_OR_RETURN(w.wq, LoadTensor(file, p + "attn_q.weight", {dim, q_dim}));
  ASSIGN_OR_RETURN(w.wk, LoadTensor(file, p + "attn_k.weight", {dim, kv_dim}));
  ASSIGN_OR_RETURN(w.wv, LoadTensor(file, p + "attn_v.weight", {dim, kv_dim}));
  ASSIGN_OR_RETURN(w.wo, LoadTensor(file, p + "attn_output.weight", {q_dim, dim}));
  ASSIGN_OR_RETURN(w.ffn_norm, LoadTensor(file, p + "ffn_norm.weight", {dim}));
  ASSIGN_OR_RETURN(w.w_gate, LoadTensor(file, p + "ffn_gate.weight", {dim, ffn}));
  ASSIGN_OR_RETURN(w.w_up, LoadTensor(file, p + "ffn_up.weight", {dim, ffn}));
  ASSIGN_OR_RETURN(w.w_down, LoadTensor(file, p + "ffn_down.weight", {ffn, dim}));
  return LoadArchitectureLayer(LoaderFor(file), c, index, w.wq, w.wk, w.arch);
}

size_t LlamaModel::weight_bytes() const {
  size_t n = token_embd_.size() + output_norm_.size() + output_.size();
  for (const LlamaLayerWeights& w : layers_) {
    n += w.attn_norm.size() + w.wq.size() + w.wk.size() + w.wv.size() + w.wo.size() +
         w.ffn_norm.size() + w.w_gate.size() + w.w_up.size() + w.w_down.size() + w.arch.bq.size() +
         w.arch.bk.size() + w.arch.bv.size() + w.arch.q_norm.size() + w.arch.k_norm.size();
  }
  return n * sizeof(float);
}

}  // namespace pagoda::worker
