// Decode attention launcher: picks the fast kernel (head_dim 64/128, group <= 8, 16-byte aligned
// tensors, decode_fast_kernel.cuh) or the generic one (decode_generic_kernel.cuh); either merges
// the partitions in its last block (decode_kernels.cuh).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/status_macros.h"
#include "worker/backend/cuda/attention/attention_common.cuh"
#include "worker/backend/cuda/attention/decode_fast_kernel.cuh"
#include "worker/backend/cuda/attention/decode_generic_kernel.cuh"
#include "worker/backend/cuda/attention/decode_kernels.cuh"
#include "worker/backend/cuda/attention/paged_attention.h"
#include "worker/backend/cuda/device_buffer.h"
#include "worker/backend/cuda/dtype.cuh"
#include "worker/backend/cuda/launch.cuh"

namespace pagoda::worker::cuda {
namespace {

using attention_internal::DecodeArgs;
using attention_internal::kDecodeThreads;

constexpr size_t kWorkspaceAlign = 256;
using attention_internal::kMaxGridYZ;

// Bytes of the partial outputs, [num_seqs][n_heads][max_partitions][head_dim] float, rounded up
// so that the (max, sum) pairs after them stay aligned.
size_t PartialOutBytes(int num_seqs, int n_heads, int head_dim, int max_partitions) {
  const size_t bytes = static_cast<size_t>(num_seqs) * n_heads * max_partitions * head_dim * 4;
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

// Calls fn(kernel) with the split kernel for head_dim hd and `group` query heads per KV head:
// the fast path when `aligned` (16-byte q and caches) allows it, else the generic one.
template <typename T, bool kContiguous, typename Fn>
cudaError_t WithSplitKernel(int hd, int group, bool aligned, Fn&& fn) {
  if (!((hd == 64 || hd == 128) && group <= 8 && aligned)) {
    return fn(attention_internal::DecodeGenericKernel<T, kContiguous>);
  }
  return attention_internal::DispatchPow2UpTo8(group, [&](auto group_pad) {
    constexpr int kGroupPad = decltype(group_pad)::value;
    if (hd == 128) return fn(attention_internal::DecodeFastKernel<T, 128, kGroupPad, kContiguous>);
    return fn(attention_internal::DecodeFastKernel<T, 64, kGroupPad, kContiguous>);
  });
}

template <typename T, bool kContiguous>
cudaError_t LaunchSplitKernel(const DecodeAttentionParams& p, const DecodeArgs& args,
                              cudaStream_t stream) {
  const dim3 grid(p.shape.n_kv_heads, p.batch.num_seqs, p.max_partitions);
  const bool aligned = attention_internal::Aligned(p.q, 16) &&
                       attention_internal::Aligned(p.k_cache, 16) &&
                       attention_internal::Aligned(p.v_cache, 16);
  return WithSplitKernel<T, kContiguous>(p.shape.head_dim, args.group, aligned, [&](auto kernel) {
    return LaunchKernelAfterPrior(kernel, grid, kDecodeThreads, 0, stream, args);
  });
}

}  // namespace

size_t DecodeAttentionWorkspaceBytes(int num_seqs, int n_heads, int head_dim, int max_partitions) {
  if (num_seqs <= 0 || n_heads <= 0 || head_dim <= 0 || max_partitions <= 0) return 0;
  return PartialOutBytes(num_seqs, n_heads, head_dim, max_partitions) +
         static_cast<size_t>(num_seqs) * n_heads * max_partitions * sizeof(float2);
}

absl::Status LaunchDecodeAttention(const DecodeAttentionParams& p, cudaStream_t stream) {
  const AttentionShape& s = p.shape;
  const AttentionBatch& b = p.batch;
  if (b.num_seqs == 0) return absl::OkStatus();
  ArgCheck check("LaunchDecodeAttention");
  attention_internal::CheckAttentionArgs(check, s, b, p.q, p.k_cache, p.v_cache, p.out, 4);
  const int pt = p.partition_tokens;
  check.RequireRange(p.max_partitions, 1, kMaxGridYZ, "max_partitions")
      .Require(
          pt >= kMinDecodePartitionTokens && pt <= kDecodePartitionTokens && (pt & (pt - 1)) == 0,
          "partition_tokens %d must be a power of two in [%d, %d]", pt, kMinDecodePartitionTokens,
          kDecodePartitionTokens)
      .Require(p.max_partitions <= 1 || p.workspace != nullptr,
               "workspace is null with max_partitions %d > 1", p.max_partitions)
      .Require(p.max_partitions <= 1 || p.counters != nullptr,
               "counters is null with max_partitions %d > 1", p.max_partitions)
      .Require(attention_internal::Aligned(p.workspace, 16),
               "workspace (%p) must be 16-byte aligned", p.workspace)
      .Require(p.contiguous_kv || b.page_table != nullptr, "batch.page_table is null");
  RETURN_IF_ERROR(check.status());
  DecodeArgs args{};
  attention_internal::FillPagedArgs(b, s, p.q, p.k_cache, p.v_cache, p.out, &args);
  if (p.max_partitions > 1) {
    char* ws = static_cast<char*>(p.workspace);
    args.part_out = reinterpret_cast<float*>(ws);
    args.part_ml = reinterpret_cast<float2*>(
        ws + PartialOutBytes(b.num_seqs, s.n_heads, s.head_dim, p.max_partitions));
    args.counters = p.counters;
  }
  args.max_partitions = p.max_partitions;
  args.partition_tokens = pt;

  return CudaStatus(DispatchDType(s.dtype,
                                  [&](auto tag) -> cudaError_t {
                                    using T = decltype(tag);
                                    return p.contiguous_kv
                                               ? LaunchSplitKernel<T, true>(p, args, stream)
                                               : LaunchSplitKernel<T, false>(p, args, stream);
                                  }),
                    "LaunchDecodeAttention");
}

int DecodeBlocksPerMultiprocessor(const AttentionShape& s) {
  if (s.n_kv_heads <= 0 || s.n_heads % s.n_kv_heads != 0) return 0;
  int blocks = 0;
  const cudaError_t err = DispatchDType(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    return WithSplitKernel<T, false>(
        s.head_dim, s.n_heads / s.n_kv_heads, /*aligned=*/true, [&](auto kernel) {
          return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
              &blocks, reinterpret_cast<const void*>(kernel), kDecodeThreads, 0);
        });
  });
  return err == cudaSuccess ? blocks : 0;
}

}  // namespace pagoda::worker::cuda
