// The emulator's scheduler: every thread of a block is a fiber on the launching thread. Each round
// runs the runnable fibers in a shuffled order, each fiber handing the host thread straight to the
// next when it blocks (one stack switch per fiber, not two through the scheduler); then the
// scheduler completes the warp collectives and block barriers whose participants have all
// arrived, until every fiber has returned or none can move.
#include "tests/support/cuda_emulation/cuda_emulation.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace pagoda::worker::cuda::emulation {
namespace {

// A fiber's saved execution context and the switch between two. On x86-64 a switch pushes the
// callee-saved registers and swaps stack pointers: swapcontext also saves the signal mask, a
// system call each way, which made the emulator spend a third of its time in the kernel.
#if defined(__x86_64__)
extern "C" void PagodaEmulationSwitch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl PagodaEmulationSwitch
  .type PagodaEmulationSwitch, @function
PagodaEmulationSwitch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size PagodaEmulationSwitch, .-PagodaEmulationSwitch
  .section .note.GNU-stack, "", @progbits
  .text
)");

struct Context {
  void* sp = nullptr;
};
void Switch(Context& save, Context& load) { PagodaEmulationSwitch(&save.sp, load.sp); }
// The first switch to `c` enters `entry` (which must never return) on the given stack: six zero
// registers for the pops, `entry` for the ret, and a zero return address for `entry` itself,
// leaving the stack pointer 16-byte aligned minus 8 at entry, as after a call.
void Prepare(Context& c, char* stack, size_t bytes, void (*entry)()) {
  const uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t{15};
  void** sp = reinterpret_cast<void**>(top - 8 * sizeof(void*));
  for (int i = 0; i < 6; ++i) sp[i] = nullptr;
  sp[6] = reinterpret_cast<void*>(entry);
  sp[7] = nullptr;
  c.sp = sp;
}
#else
struct Context {
  ucontext_t uc;
};
void Switch(Context& save, Context& load) { swapcontext(&save.uc, &load.uc); }
void Prepare(Context& c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

// Kernels keep small register arrays (the sampler's and attention's largest are a few KiB);
// pages of a stack that are never touched cost nothing. Below each stack, a page that faults on
// access turns an overflow into a crash instead of corrupting the next fiber's stack.
constexpr size_t kStackBytes = 256 << 10;
constexpr size_t kGuardBytes = 4096;
constexpr unsigned kMaxBlockThreads = 1024;
constexpr size_t kMaxDynamicShared = 227 << 10;  // sm_90's opt-in limit per block

enum class Wait { kNone, kSync, kWarp, kDone };

// A thread's asynchronous operations of one kind: the ones not committed yet, then the
// committed groups, oldest first; each carried out when a wait retires its group.
struct AsyncOps {
  std::vector<std::function<void()>> open;
  std::deque<std::vector<std::function<void()>>> groups;

  bool empty() const { return open.empty() && groups.empty(); }
  void Clear() {
    open.clear();
    groups.clear();
  }
  void Commit() {
    groups.push_back(std::move(open));
    open.clear();
  }
  // Carries out the oldest groups until at most `pending` remain.
  void Retire(int pending) {
    while (groups.size() > static_cast<size_t>(std::max(pending, 0))) {
      for (const std::function<void()>& op : groups.front()) op();
      groups.pop_front();
    }
  }
};

struct Fiber {
  Context context;
  char* stack = nullptr;  // kStackBytes, in Stacks
  Builtins builtins;
  Wait wait = Wait::kNone;
  unsigned mask = 0;    // kWarp: the collective's lane mask
  uint64_t posted = 0;  // kWarp: this lane's value
  // kWarp, once released: the collective's values (in LaunchState::values) and its posting lanes.
  const uint64_t* values = nullptr;
  unsigned arrived = 0;
  // kWarp, a gather (WarpGather): this lane's bytes, and where every lane's go.
  const void* gather_src = nullptr;
  size_t gather_bytes = 0;
  void* gather_dst = nullptr;
  // wgmma operations and cp.async copies issued and not yet carried out.
  AsyncOps wgmma;
  AsyncOps copies;
  // 16-byte granules of dynamic shared memory this thread's cp.async copies wrote since its last
  // fence.proxy.async (LaunchState::unfenced marks them for the whole block).
  std::vector<size_t> unfenced;
  bool waited_prior = false;  // called PriorGridsDone (griddepcontrol.wait)
};

// One mapping holding every fiber's stack, each above a guard page.
class Stacks {
 public:
  explicit Stacks(size_t count) : bytes_(count * (kGuardBytes + kStackBytes)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "cuda emulation: cannot map %zu bytes of fiber stacks\n", bytes_);
      std::abort();
    }
    base_ = static_cast<char*>(p);
    for (size_t i = 0; i < count; ++i) mprotect(Guard(i), kGuardBytes, PROT_NONE);
  }
  ~Stacks() { munmap(base_, bytes_); }
  Stacks(const Stacks&) = delete;
  Stacks& operator=(const Stacks&) = delete;

  char* Stack(size_t i) const { return Guard(i) + kGuardBytes; }

 private:
  char* Guard(size_t i) const { return base_ + i * (kGuardBytes + kStackBytes); }

  char* base_ = nullptr;
  size_t bytes_;
};

// The fiber stacks of the launch that runs, kept from launch to launch (under launch_mutex):
// mapping, guarding and faulting in fresh stacks for every launch cost more system time than
// most kernels take.
Stacks& StacksFor(size_t count) {
  static std::unique_ptr<Stacks> stacks;
  static size_t capacity = 0;
  if (count > capacity) {
    stacks.reset();
    stacks = std::make_unique<Stacks>(count);
    capacity = count;
  }
  return *stacks;
}

struct LaunchState {
  std::vector<Fiber> fibers;
  std::string fault;  // the first ReportFault of the launch
  Context scheduler;
  const std::function<void()>* body = nullptr;
  // Launched after its prior grid (LaunchKernelAfterPrior): every thread must wait for it.
  bool after_prior = false;
  Fiber* current = nullptr;
  std::unique_ptr<char[]> dynamic_shared;
  size_t dynamic_shared_bytes = 0;
  // Per 16-byte granule of dynamic shared memory: written by cp.async (the generic proxy) and not
  // yet fenced by its writer, so invisible to wgmma (the async proxy) on the GPU.
  std::vector<bool> unfenced;
  // Per granule: cp.async copies issued into it and not yet carried out (landed at a wait).
  std::vector<int> in_flight;
  // Per granule: wgmma shares (one thread's chunks of one operation) issued on it and not yet
  // carried out. On the GPU an operation reads its shared operands at any time until its wait,
  // so a copy into them before then races with it.
  std::vector<int> wgmma_reads;
  // The released warp collectives' values, each in the row of its lowest posting lane: a lane
  // reads them as it resumes, in the round after the release, before the next release can
  // reuse the row.
  std::vector<std::array<uint64_t, 32>> values;
  // This round's runnable fibers in their shuffled order, and the next one to run.
  std::vector<Fiber*> round;
  size_t next = 0;
  uint64_t rng = 0;  // the rounds' orders (ShuffleOrder); seeded per launch (see Launch)
};

// Global by necessity (see the header): __shared__ variables are statics, so launches are
// serialized, and the fibers find their launch through the thread-local pointer.
std::mutex launch_mutex;
thread_local LaunchState* active = nullptr;

// Launches so far: seeds each launch's schedule, so that repeated launches run their fibers in
// different orders (a race shows up as a result that changes) while a process is reproducible.
uint64_t launches = 0;  // guarded by launch_mutex

std::mutex error_mutex;
cudaError_t sticky_error = cudaSuccess;
std::string last_message;

void SetError(cudaError_t err, std::string message) {
  std::lock_guard<std::mutex> lock(error_mutex);
  sticky_error = err;
  last_message = std::move(message);
  if (!last_message.empty()) std::fprintf(stderr, "cuda emulation: %s\n", last_message.c_str());
}

// The running fiber, and its built-ins for Current().
void SetCurrent(LaunchState& s, Fiber* f) {
  s.current = f;
  current_builtins = f != nullptr ? &f->builtins : nullptr;
}

Fiber& Self() {
  if (active == nullptr || active->current == nullptr) {
    std::fprintf(stderr, "cuda emulation: a device built-in used outside a kernel\n");
    std::abort();
  }
  return *active->current;
}

// Hands the host thread from `f`, which has just blocked or returned, to the round's next fiber,
// or back to the scheduler after the round's last.
void Yield(Fiber& f) {
  LaunchState& s = *active;
  if (s.next < s.round.size()) {
    Fiber& to = *s.round[s.next++];
    SetCurrent(s, &to);
    Switch(f.context, to.context);
  } else {
    SetCurrent(s, nullptr);
    Switch(f.context, s.scheduler);
  }
}

// Suspends the running fiber until the scheduler releases what it waits for.
void Block(Fiber& f, Wait wait) {
  f.wait = wait;
  Yield(f);
}

// A fiber's entry: the kernel, then back to the scheduler for good.
void FiberMain() {
  LaunchState& s = *active;
  (*s.body)();
  Fiber& f = *s.current;
  if (!f.wgmma.empty()) ReportFault("a thread exited with wgmma operations it never waited for");
  if (s.after_prior && !f.waited_prior) {
    ReportFault(
        "a thread of a kernel launched after its prior grid (programmatic dependent launch) "
        "exited without waiting for that grid (PriorGridsDone: griddepcontrol.wait)");
  }
  // Copies still in flight land anyway, as on the GPU.
  if (!f.copies.empty()) {
    f.copies.Commit();
    f.copies.Retire(0);
  }
  f.wait = Wait::kDone;
  Yield(f);
  std::abort();  // a finished fiber is never resumed
}

std::string Describe(const LaunchState& s, const char* what) {
  std::string out = std::string("deadlock: ") + what + "; block (" +
                    std::to_string(s.fibers[0].builtins.block_idx.x) + "," +
                    std::to_string(s.fibers[0].builtins.block_idx.y) + "," +
                    std::to_string(s.fibers[0].builtins.block_idx.z) + "), threads:";
  int shown = 0;
  for (size_t i = 0; i < s.fibers.size() && shown < 16; ++i) {
    const Wait w = s.fibers[i].wait;
    if (w == Wait::kDone) continue;
    out += " " + std::to_string(i) + (w == Wait::kSync ? "@sync" : "@warp");
    ++shown;
  }
  return out;
}

// Completes the warp collectives whose participants have all arrived: for each mask that waiting
// lanes of a warp name, when every lane of the mask waits with that mask or has returned.
void ReleaseWarps(LaunchState& s, bool* released) {
  const size_t n = s.fibers.size();
  for (size_t w0 = 0; w0 < n; w0 += 32) {
    const size_t lanes = std::min<size_t>(32, n - w0);
    unsigned pending = 0;  // lanes waiting in a collective not yet released in this pass
    for (size_t l = 0; l < lanes; ++l) {
      if (s.fibers[w0 + l].wait == Wait::kWarp) pending |= 1u << l;
    }
    while (pending != 0) {
      const unsigned mask = s.fibers[w0 + std::countr_zero(pending)].mask;
      unsigned posting = 0;
      bool complete = true;
      for (size_t l = 0; l < lanes; ++l) {
        const Fiber& f = s.fibers[w0 + l];
        const bool waits_here = f.wait == Wait::kWarp && f.mask == mask;
        if (waits_here) posting |= 1u << l;
        if ((mask >> l & 1u) != 0 && !waits_here && f.wait != Wait::kDone) complete = false;
      }
      pending &= ~posting;
      if (!complete) continue;
      std::array<uint64_t, 32>& all = s.values[w0 + std::countr_zero(posting)];
      for (size_t l = 0; l < 32; ++l) {
        all[l] = (posting >> l & 1u) != 0 ? s.fibers[w0 + l].posted : 0;
      }
      for (size_t l = 0; l < lanes; ++l) {
        if ((posting >> l & 1u) == 0) continue;
        Fiber& f = s.fibers[w0 + l];
        f.values = all.data();
        for (size_t src = 0; src < lanes && f.gather_bytes > 0; ++src) {
          if ((posting >> src & 1u) == 0) continue;
          std::memcpy(static_cast<char*>(f.gather_dst) + src * f.gather_bytes,
                      s.fibers[w0 + src].gather_src, f.gather_bytes);
        }
        f.arrived = posting;
        f.wait = Wait::kNone;
      }
      *released = true;
    }
  }
}

// Shuffles a round's order (Fisher-Yates on splitmix64 draws, each bounded by Lemire's multiply,
// whose bias is below 2^-53 here): it runs every round, and this costs a fraction of
// std::shuffle over std::mt19937.
template <typename T>
void ShuffleOrder(std::vector<T>& v, uint64_t& state) {
  for (size_t i = v.size(); i > 1; --i) {
    uint64_t z = (state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    const size_t j = static_cast<size_t>((static_cast<unsigned __int128>(z) * i) >> 64);
    std::swap(v[i - 1], v[j]);
  }
}

// Runs one block's fibers to completion; false (with *error) on a deadlock.
bool RunBlock(LaunchState& s, std::string* error) {
  for (;;) {
    s.round.clear();
    for (Fiber& f : s.fibers) {
      if (f.wait == Wait::kNone) s.round.push_back(&f);
    }
    ShuffleOrder(s.round, s.rng);
    if (!s.round.empty()) {
      s.next = 1;
      SetCurrent(s, s.round[0]);
      Switch(s.scheduler, s.round[0]->context);
    }
    SetCurrent(s, nullptr);
    bool released = false;
    ReleaseWarps(s, &released);
    if (released) continue;
    size_t alive = 0, at_sync = 0;
    for (const Fiber& f : s.fibers) {
      alive += f.wait != Wait::kDone;
      at_sync += f.wait == Wait::kSync;
    }
    if (alive == 0) return true;
    if (at_sync == alive) {
      for (Fiber& f : s.fibers) {
        if (f.wait == Wait::kSync) f.wait = Wait::kNone;
      }
      continue;
    }
    *error = Describe(s, at_sync > 0 ? "__syncthreads reached by some threads while others wait "
                                       "in a warp collective"
                                     : "warp collectives whose lanes wait in other collectives");
    return false;
  }
}

// Points the fiber at the kernel's start.
void StartFiber(Fiber& f, const Builtins& builtins) {
  f.builtins = builtins;
  f.wait = Wait::kNone;
  f.wgmma.Clear();
  f.copies.Clear();
  f.unfenced.clear();
  f.waited_prior = false;
  Prepare(f.context, f.stack, kStackBytes, FiberMain);
}

}  // namespace

cudaError_t CheckConfiguration(dim3 grid, dim3 block, size_t dynamic_shared_bytes) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  const bool valid = grid.x > 0 && grid.y > 0 && grid.z > 0 && grid.y <= 65535 && grid.z <= 65535 &&
                     threads > 0 && threads <= kMaxBlockThreads && block.z <= 64 &&
                     dynamic_shared_bytes <= kMaxDynamicShared;
  return valid ? cudaSuccess : cudaErrorInvalidConfiguration;
}

void ReportFault(const std::string& message) {
  LaunchState& s = *active;
  if (!s.fault.empty()) return;
  const Builtins& b = Self().builtins;
  s.fault = message + " (thread " + std::to_string(b.thread_idx.x) + " of block (" +
            std::to_string(b.block_idx.x) + "," + std::to_string(b.block_idx.y) + "," +
            std::to_string(b.block_idx.z) + "))";
}

constinit thread_local const Builtins* current_builtins = nullptr;

const Builtins& OutsideKernel() {
  std::fprintf(stderr, "cuda emulation: a device built-in used outside a kernel\n");
  std::abort();
}

// A kernel launched after its prior grid must wait for it before anything else; the emulator
// sees its barriers, warp collectives and copies (not its plain loads and stores), so those
// before the wait fail the launch.
void CheckWaitedPrior(const char* what) {
  const Fiber& f = Self();
  if (active->after_prior && !f.waited_prior) {
    ReportFault(std::string(what) +
                " before PriorGridsDone in a kernel launched after its prior grid (programmatic "
                "dependent launch)");
  }
}

void SyncThreads() {
  CheckWaitedPrior("__syncthreads");
  Block(Self(), Wait::kSync);
}

void* DynamicShared() { return active->dynamic_shared.get(); }

const uint64_t* WarpExchange(unsigned mask, uint64_t value, unsigned* posted) {
  CheckWaitedPrior("a warp collective");
  Fiber& f = Self();
  if ((mask >> LaneId() & 1u) == 0) {
    std::fprintf(stderr, "cuda emulation: a warp collective called by a lane outside its mask\n");
    std::abort();
  }
  f.mask = mask;
  f.posted = value;
  Block(f, Wait::kWarp);
  f.gather_bytes = 0;
  *posted = f.arrived;
  return f.values;
}

unsigned WarpGather(unsigned mask, const void* mine, size_t bytes, void* all) {
  Fiber& f = Self();
  f.gather_src = mine;
  f.gather_bytes = bytes;
  f.gather_dst = all;
  unsigned posted = 0;
  WarpExchange(mask, 0, &posted);
  return posted;
}

void LdMatrixX4(uint32_t (&r)[4], const void* row, bool trans) {
  unsigned posted = 0;
  const uint64_t* rows = WarpExchange(0xffffffffu, reinterpret_cast<uintptr_t>(row), &posted);
  r[0] = r[1] = r[2] = r[3] = 0;
  if (posted != 0xffffffffu) {
    ReportFault("ldmatrix called with lanes that have exited");
    return;
  }
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    ReportFault("ldmatrix row address not 16-byte aligned");
    return;
  }
  const int lane = LaneId();
  // Element (i, j) of matrix m: 16 bits at column j of the row that lane 8m + i addressed.
  auto element = [&](int m, int i, int j) {
    uint16_t v;
    std::memcpy(&v, reinterpret_cast<const char*>(rows[8 * m + i]) + 2 * j, 2);
    return static_cast<uint32_t>(v);
  };
  for (int m = 0; m < 4; ++m) {
    const int i = trans ? 2 * (lane % 4) : lane / 4, j = trans ? lane / 4 : 2 * (lane % 4);
    r[m] = trans ? element(m, i, j) | element(m, i + 1, j) << 16
                 : element(m, i, j) | element(m, i, j + 1) << 16;
  }
}

namespace {

// A 16-bit element's value. fp16 is rescaled in float arithmetic, not by __half2float's
// branches, as the wgmma operands convert millions of elements per test; the result equals
// __half2float's for every input (NaNs included, as its canonical NaN).
inline float ElementToFloat(uint32_t bits, bool bf16) {
  if (bf16) return std::bit_cast<float>(bits << 16);
  // The half's exponent and mantissa moved to a float's places: times 2^112 (the exponent
  // biases' difference) that is the half's magnitude, subnormals included, exactly.
  const uint32_t magnitude = (bits & 0x7fffu) << 13;
  float f = std::bit_cast<float>(magnitude) * 0x1p112f;
  if ((bits & 0x7c00u) == 0x7c00u) {
    if ((bits & 0x3ffu) != 0) return std::bit_cast<float>(0x7fffffffu);
    f = std::bit_cast<float>(0x7f800000u);
  }
  return (bits & 0x8000u) != 0 ? -f : f;
}

}  // namespace

void MmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
  const uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
  uint32_t all[32][6];
  if (WarpGather(0xffffffffu, mine, sizeof(mine), all) != 0xffffffffu) {
    ReportFault("mma.sync called with lanes that have exited");
    return;
  }
  auto to_float = [bf16](uint32_t bits) { return ElementToFloat(bits, bf16); };
  // A[row][k] and B[k][col] from the lane and register that hold them (layouts in mma.cuh).
  auto a_at = [&](int row, int k) {
    const int lane = (row % 8) * 4 + (k % 8) / 2, reg = (row / 8) + 2 * (k / 8);
    return to_float(all[lane][reg] >> (16 * (k % 2)) & 0xffffu);
  };
  auto b_at = [&](int k, int col) {
    const int lane = col * 4 + (k % 8) / 2;
    return to_float(all[lane][4 + k / 8] >> (16 * (k % 2)) & 0xffffu);
  };
  const int lane = LaneId(), g = lane / 4, t = lane % 4;
  // This lane's two rows of A and two columns of B, converted once.
  float rows[2][16], cols[2][16];
  for (int k = 0; k < 16; ++k) {
    for (int h = 0; h < 2; ++h) {
      rows[h][k] = a_at(g + 8 * h, k);
      cols[h][k] = b_at(k, 2 * t + h);
    }
  }
  for (int i = 0; i < 4; ++i) {
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) sum += rows[i / 2][k] * cols[i % 2][k];
    d[i] += sum;
  }
}

uint32_t SharedWindowAddress(const void* p) {
  const char* base = active->dynamic_shared.get();
  const char* c = static_cast<const char*>(p);
  if (c < base || c >= base + std::max<size_t>(active->dynamic_shared_bytes, 1)) {
    ReportFault("a shared address taken of a pointer outside the block's dynamic shared memory");
    return 0;
  }
  return kDynamicSharedAddress + static_cast<uint32_t>(c - base);
}

namespace {

// A 128-byte-swizzled wgmma operand (layouts in worker/backend/cuda/wgmma.cuh, from the PTX
// ISA's canonical layouts), read from the running block's dynamic shared memory.
class SwizzledOperand {
 public:
  // False (after a fault) for a descriptor that is not one we emulate.
  bool Decode(uint64_t desc, bool mn_major) {
    if (desc >> 62 != 1 || (desc >> 49 & 7) != 0) {
      ReportFault("a wgmma descriptor that is not 128-byte swizzled with base offset 0");
      return false;
    }
    start_ = static_cast<uint32_t>(desc & 0x3fff) << 4;
    leading_ = static_cast<uint32_t>(desc >> 16 & 0x3fff) << 4;
    stride_ = static_cast<uint32_t>(desc >> 32 & 0x3fff) << 4;
    mn_major_ = mn_major;
    return true;
  }

  bool mn_major() const { return mn_major_; }

  // The shared address of the 16-byte chunk holding (mn, k..k + 7) K-major or (mn..mn + 7, k)
  // MN-major.
  uint32_t ChunkAddress(int mn, int k) const {
    const uint32_t m = static_cast<uint32_t>(mn), kk = static_cast<uint32_t>(k);
    uint32_t addr = mn_major_ ? start_ + (m % 64) * 2 + (m / 64) * leading_ + (kk % 8) * 128 +
                                    (kk / 8) * stride_
                              : start_ + (m % 8) * 128 + (m / 8) * stride_ + (kk / 8) * 16;
    return addr ^ (addr >> 7 & 7) << 4;  // Swizzle<3,4,3>: the 16-byte chunk XOR the row within 8
  }
  // False (after a fault naming `what`) outside the dynamic shared memory or where cp.async
  // wrote and its writer has not fenced since.
  static bool Readable(uint32_t addr, const char* what) {
    const LaunchState& s = *active;
    if (addr < kDynamicSharedAddress ||
        addr + 16 > kDynamicSharedAddress + s.dynamic_shared_bytes) {
      ReportFault(std::string("wgmma ") + what + " shared address " + std::to_string(addr) +
                  ", outside the block's dynamic shared memory");
      return false;
    }
    if (s.unfenced[(addr - kDynamicSharedAddress) / 16]) {
      ReportFault(std::string("wgmma ") + what + " shared address " + std::to_string(addr) +
                  ", written by cp.async with no fence.proxy.async by its writer since");
      return false;
    }
    return true;
  }

  // The eight elements of one 16-byte chunk: (mn, k..k + 7) K-major, (mn..mn + 7, k) MN-major,
  // where k (K-major) or mn (MN-major) is a multiple of 8. Both layouts
  // keep such a run in one chunk (the swizzle permutes whole chunks), which is also one
  // fence-tracking granule. False (after a fault) outside the dynamic shared memory or where
  // cp.async wrote and its writer has not fenced since.
  bool ReadChunk(int mn, int k, uint16_t (&out)[8]) const {
    const uint32_t addr = ChunkAddress(mn, k);
    if (!Readable(addr, "read")) return false;
    std::memcpy(out, active->dynamic_shared.get() + (addr - kDynamicSharedAddress), 16);
    return true;
  }
  // At issue: whether the chunk may be read from now on, its cp.async copies (any thread's)
  // landed and fenced. On the GPU the operation reads at some point before its wait, so the
  // operand must be complete when it is issued; carrying the operation out at the wait alone
  // would hide a copy waited for only after the issue.
  // The chunk's granule goes to `granules` (read until the operation is carried out).
  bool IssuableChunk(int mn, int k, std::vector<size_t>& granules) const {
    const uint32_t addr = ChunkAddress(mn, k);
    if (!Readable(addr, "issued on")) return false;
    const size_t granule = (addr - kDynamicSharedAddress) / 16;
    if (active->in_flight[granule] != 0) {
      ReportFault("wgmma issued on shared address " + std::to_string(addr) +
                  ", where a cp.async has not landed (no wait covers it yet)");
      return false;
    }
    granules.push_back(granule);
    return true;
  }

 private:
  uint32_t start_ = 0, leading_ = 0, stride_ = 0;
  bool mn_major_ = false;
};

}  // namespace

void WgmmaIssue(float* d, int n, const uint32_t* a_regs, uint64_t a_desc, uint64_t b_desc,
                bool accumulate, bool trans_b, bool bf16) {
  Fiber& f = Self();
  const Builtins& b = f.builtins;
  const unsigned linear =
      (b.thread_idx.z * b.block_dim.y + b.thread_idx.y) * b.block_dim.x + b.thread_idx.x;
  const int warp = static_cast<int>(linear / 32 % 4), lane = static_cast<int>(linear % 32);
  // Every lane of the warp issues together (.sync.aligned): a collective.
  unsigned posted = 0;
  WarpExchange(0xffffffffu, 0, &posted);
  if (posted != 0xffffffffu) {
    ReportFault("wgmma called with lanes that have exited");
    return;
  }
  if (n < 8 || n > 256 || n % 8 != 0) {
    ReportFault("wgmma with n " + std::to_string(n));
    return;
  }
  // This thread's share of the operands (the chunks it reads below) must be complete now, and
  // stays claimed (wgmma_reads) until the operation is carried out.
  std::vector<size_t> granules;
  {
    const int g = lane / 4, t = lane % 4;
    SwizzledOperand a_op, b_op;
    if ((a_regs == nullptr && !a_op.Decode(a_desc, false)) || !b_op.Decode(b_desc, trans_b)) return;
    for (int h = 0; h < 2 && a_regs == nullptr; ++h) {
      for (int k = 0; k < 16; k += 8) {
        if (!a_op.IssuableChunk(16 * warp + g + 8 * h, k, granules)) return;
      }
    }
    for (int j = 0; j < n / 8; ++j) {
      for (int e = 0; e < 2 && !b_op.mn_major(); ++e) {
        for (int k = 0; k < 16; k += 8) {
          if (!b_op.IssuableChunk(8 * j + 2 * t + e, k, granules)) return;
        }
      }
      for (int k = 0; k < 16 && b_op.mn_major(); ++k) {
        if (!b_op.IssuableChunk(8 * j, k, granules)) return;
      }
    }
  }
  for (size_t granule : granules) ++active->wgmma_reads[granule];
  f.wgmma.open.push_back([=, granules = std::move(granules)] {
    // The claim holds until the operation is done reading, early returns included: the shared
    // operands are read below, after a warp collective that lets other warps run first.
    struct Release {
      const std::vector<size_t>& granules;
      ~Release() {
        for (size_t granule : granules) --active->wgmma_reads[granule];
      }
    } release{granules};
    const int g = lane / 4, t = lane % 4;
    // The warp's A registers, lane l's in gathered[l], read now: they belong to the operation
    // until its wait, as its accumulators do.
    uint32_t gathered[32][4] = {};
    if (a_regs != nullptr && WarpGather(0xffffffffu, a_regs, 16, gathered) != 0xffffffffu) {
      ReportFault("wgmma waited for with lanes that have exited");
      return;
    }
    SwizzledOperand a_op, b_op;
    if ((a_regs == nullptr && !a_op.Decode(a_desc, false)) || !b_op.Decode(b_desc, trans_b)) return;
    // A's two rows of this thread, converted once.
    float a[2][16];
    uint16_t chunk[8];
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 16; k += 8) {
        if (a_regs != nullptr) {
          for (int i = k; i < k + 8; ++i) {
            a[h][i] = ElementToFloat(
                gathered[4 * g + (i % 8) / 2][h + 2 * (i / 8)] >> (16 * (i % 2)) & 0xffffu, bf16);
          }
          continue;
        }
        if (!a_op.ReadChunk(16 * warp + g + 8 * h, k, chunk)) return;
        for (int i = 0; i < 8; ++i) a[h][k + i] = ElementToFloat(chunk[i], bf16);
      }
    }
    // B's columns 8 j + 2 t + e, two at a time.
    for (int j = 0; j < n / 8; ++j) {
      float col[2][16];
      for (int e = 0; e < 2 && !b_op.mn_major(); ++e) {
        for (int k = 0; k < 16; k += 8) {
          if (!b_op.ReadChunk(8 * j + 2 * t + e, k, chunk)) return;
          for (int i = 0; i < 8; ++i) col[e][k + i] = ElementToFloat(chunk[i], bf16);
        }
      }
      for (int k = 0; k < 16 && b_op.mn_major(); ++k) {
        if (!b_op.ReadChunk(8 * j, k, chunk)) return;  // B[k][8 j .. 8 j + 7]
        col[0][k] = ElementToFloat(chunk[2 * t], bf16);
        col[1][k] = ElementToFloat(chunk[2 * t + 1], bf16);
      }
      for (int e = 0; e < 2; ++e) {
        for (int h = 0; h < 2; ++h) {
          float sum = 0.0f;
          for (int k = 0; k < 16; ++k) sum += a[h][k] * col[e][k];
          float& out = d[4 * j + 2 * h + e];
          out = accumulate ? out + sum : sum;
        }
      }
    }
  });
}

void WgmmaCommit() { Self().wgmma.Commit(); }

void WgmmaWait(int pending) { Self().wgmma.Retire(pending); }

void CopyAsync16(void* dst, const void* src, bool fill) {
  CheckWaitedPrior("cp.async");
  // cp.async of 16 bytes faults on the GPU ("misaligned address") unless both ends are 16-byte
  // aligned; the source is checked only where it is read.
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 ||
      (fill && reinterpret_cast<uintptr_t>(src) % 16 != 0)) {
    ReportFault("cp.async of 16 bytes between addresses not 16-byte aligned");
    return;
  }
  std::array<unsigned char, 16> bytes{};
  if (fill) std::memcpy(bytes.data(), src, 16);  // global memory: the same bytes until then
  LaunchState& s = *active;
  const char* base = s.dynamic_shared.get();
  const char* c = static_cast<const char*>(dst);
  const bool dynamic = c >= base && c < base + s.dynamic_shared_bytes;
  const size_t granule = dynamic ? static_cast<size_t>(c - base) / 16 : 0;
  // The copy may land at any time until its wait, so a wgmma issued on those bytes and not yet
  // done reading them races with it. (None can claim them after this issue: a wgmma is refused
  // on bytes with a copy in flight, so checking here covers the landing too.)
  if (dynamic && s.wgmma_reads[granule] != 0) {
    ReportFault("cp.async into shared address " +
                std::to_string(kDynamicSharedAddress + static_cast<size_t>(c - base)) +
                ", which a wgmma issued and not yet waited for reads");
    return;
  }
  if (dynamic) ++s.in_flight[granule];
  Self().copies.open.push_back([dst, bytes, dynamic, granule] {
    std::memcpy(dst, bytes.data(), 16);
    if (dynamic) {
      --active->in_flight[granule];
      active->unfenced[granule] = true;
      Self().unfenced.push_back(granule);
    }
  });
}

void FenceProxyAsync() {
  Fiber& f = Self();
  for (size_t granule : f.unfenced) active->unfenced[granule] = false;
  f.unfenced.clear();
}

void CopyAsyncCommit() { Self().copies.Commit(); }

void CopyAsyncWait(int pending) { Self().copies.Retire(pending); }

void PriorGridsDone() { Self().waited_prior = true; }

cudaError_t Launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                   const std::function<void()>& body, bool after_prior) {
  if (CheckConfiguration(grid, block, dynamic_shared_bytes) != cudaSuccess) {
    SetError(cudaErrorInvalidConfiguration, "invalid launch configuration");
    return cudaErrorInvalidConfiguration;
  }
  std::lock_guard<std::mutex> lock(launch_mutex);
  LaunchState s;
  s.rng = ++launches;
  s.body = &body;
  s.after_prior = after_prior;
  const unsigned threads = block.x * block.y * block.z;
  s.fibers.resize(threads);
  s.values.resize(threads);
  Stacks& stacks = StacksFor(threads);
  for (unsigned t = 0; t < threads; ++t) s.fibers[t].stack = stacks.Stack(t);
  s.dynamic_shared.reset(new char[std::max<size_t>(dynamic_shared_bytes, 16)]);
  s.dynamic_shared_bytes = dynamic_shared_bytes;
  active = &s;
  std::string error;
  bool ok = true;
  // The blocks in a shuffled order (ShuffleOrder's draws over their linear indices).
  const uint64_t num_blocks = uint64_t{grid.x} * grid.y * grid.z;
  std::vector<uint64_t> order(num_blocks);
  for (uint64_t i = 0; i < num_blocks; ++i) order[i] = i;
  ShuffleOrder(order, s.rng);
  for (uint64_t i = 0; ok && i < num_blocks; ++i) {
    const uint64_t b = order[i];
    const uint3 block_idx =
        make_uint3(static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                   static_cast<unsigned>(b / (uint64_t{grid.x} * grid.y)));
    // Shared memory starts undefined on the GPU: poison the dynamic part (NaN as floats).
    std::memset(s.dynamic_shared.get(), 0xff, dynamic_shared_bytes);
    s.unfenced.assign((dynamic_shared_bytes + 15) / 16, false);
    s.in_flight.assign((dynamic_shared_bytes + 15) / 16, 0);
    s.wgmma_reads.assign((dynamic_shared_bytes + 15) / 16, 0);
    for (unsigned t = 0; t < threads; ++t) {
      const uint3 thread_idx =
          make_uint3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
      StartFiber(s.fibers[t], {thread_idx, block_idx, block, grid});
    }
    ok = RunBlock(s, &error) && s.fault.empty();
  }
  active = nullptr;
  if (!s.fault.empty()) error = s.fault;
  if (!ok) {
    SetError(cudaErrorLaunchFailure, error);
    return cudaErrorLaunchFailure;
  }
  std::lock_guard<std::mutex> error_lock(error_mutex);
  last_message.clear();
  return cudaSuccess;
}

std::string LastLaunchError() {
  std::lock_guard<std::mutex> lock(error_mutex);
  return last_message;
}

cudaError_t TakeLastError() {
  std::lock_guard<std::mutex> lock(error_mutex);
  const cudaError_t err = sticky_error;
  sticky_error = cudaSuccess;
  return err;
}

cudaError_t PeekLastError() {
  std::lock_guard<std::mutex> lock(error_mutex);
  return sticky_error;
}

}  // namespace pagoda::worker::cuda::emulation
