// The kernels' own threads: a small pool whose workers spin a moment between calls (not OpenMP).
//
// A decode step calls the kernels about 170 times (one a packed layer), each for 50-300 us of work, and an engine
// decodes in whatever Python thread leads the step. GNU OpenMP gives each thread that opens a parallel region a team
// of its own, and once its managed threads outnumber the CPUs (two Python threads that ever ran torch in parallel on
// a 2-core machine) its workers spin for only a hundred iterations before they sleep: every call then pays a futex
// wake-up. Measured on the 2-core EPYC (qwen2.5-coder-0.5b `mixed`, batch 1): 29-31 ms a step when the main thread
// decodes, 43-49 ms when another thread does, 26-28 ms when one thread does all the work; a loop of six packed
// layers took 190-320 us in the main thread and 540-820 us in another.
//
// This pool has torch.get_num_threads() - 1 workers for the whole process (made on first use). The caller publishes a
// job (a range of tiles and the function of one chunk), works on it too, and returns when every chunk is done and no
// worker holds the job. Between jobs a worker spins (yielding the CPU to any thread that wants it) for kSpinMicros,
// then sleeps on a condition variable until the next job. Chunks are taken dynamically; each tile is computed by one
// thread with the same code as before, so outputs are bit-identical for any split. One job at a time: a second thread
// that calls while a job runs computes its own serially. A forked child starts a pool of its own.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>

#include <pthread.h>
#include <sched.h>

namespace active_rag_kernels {

class SpinPool {
 public:
  static constexpr int64_t kSpinMicros = 300;

  // fn(begin, end) over [0, count), in chunks of at least `grain`, on up to torch.get_num_threads() threads.
  template <typename F>
  static void parallel_for(int64_t count, int64_t grain, const F& fn) {
    if (count <= 0) return;
    const int threads = std::max(1, at::get_num_threads());
    grain = std::max<int64_t>(1, grain);
    if (threads == 1 || count <= grain || at::in_parallel_region()) {
      fn(0, count);
      return;
    }
    instance().run(count, grain, threads, [](const void* f, int64_t b, int64_t e) { (*static_cast<const F*>(f))(b, e); },
                   &fn);
  }

 private:
  using Call = void (*)(const void*, int64_t, int64_t);

  struct Job {
    Call call;
    const void* fn;
    int64_t count, chunk, chunks;
    std::atomic<int64_t> next{0}, done{0};
    std::atomic<int> refs{0};
    std::atomic<bool> failed{false};
    std::exception_ptr error;
  };

  std::mutex post_;                // one job at a time
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<Job*> current_{nullptr};
  std::atomic<int> entering_{0};  // workers between reading current_ and taking a reference
  std::atomic<int> sleepers_{0};
  int spawned_ = 0;                // under post_

  static SpinPool*& slot() {
    static SpinPool* pool = nullptr;
    return pool;
  }

  static SpinPool& instance() {
    static std::once_flag once;
    std::call_once(once, [] {
      slot() = new SpinPool();  // never freed: detached workers may outlive static destruction
      pthread_atfork(nullptr, nullptr, [] { slot() = new SpinPool(); });  // a child has none of the parent's threads
    });
    return *slot();
  }

  static void work(Job* job) {
    for (int64_t c = job->next.fetch_add(1); c < job->chunks; c = job->next.fetch_add(1)) {
      const int64_t begin = c * job->chunk, end = std::min(job->count, begin + job->chunk);
      if (!job->failed.load()) {
        try {
          job->call(job->fn, begin, end);
        } catch (...) {
          bool expected = false;
          if (job->failed.compare_exchange_strong(expected, true)) job->error = std::current_exception();
        }
      }
      job->done.fetch_add(1);
    }
  }

  void worker() {
    uint64_t seen = generation_.load();
    for (;;) {
      auto start = std::chrono::steady_clock::now();
      int spins = 0;
      while (generation_.load() == seen) {
        if (++spins % 64 == 0 &&
            std::chrono::steady_clock::now() - start > std::chrono::microseconds(kSpinMicros)) {
          std::unique_lock<std::mutex> lock(sleep_mutex_);
          sleepers_.fetch_add(1);
          wake_.wait(lock, [&] { return generation_.load() != seen; });
          sleepers_.fetch_sub(1);
          break;
        }
        sched_yield();
      }
      seen = generation_.load();
      entering_.fetch_add(1);
      Job* job = current_.load();
      if (job != nullptr) job->refs.fetch_add(1);
      entering_.fetch_sub(1);
      if (job != nullptr) {
        work(job);
        job->refs.fetch_sub(1);
      }
    }
  }

  void run(int64_t count, int64_t grain, int threads, Call call, const void* fn) {
    std::unique_lock<std::mutex> lock(post_, std::try_to_lock);
    if (!lock.owns_lock()) {  // another thread's job is running: this one alone
      call(fn, 0, count);
      return;
    }
    while (spawned_ < threads - 1) {
      std::thread([this] { worker(); }).detach();
      ++spawned_;
    }
    Job job;
    job.call = call;
    job.fn = fn;
    job.count = count;
    job.chunk = std::max<int64_t>(grain, (count + 4 * threads - 1) / (4 * threads));
    job.chunks = (count + job.chunk - 1) / job.chunk;
    current_.store(&job);
    generation_.fetch_add(1);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> guard(sleep_mutex_);
      wake_.notify_all();
    }
    work(&job);
    while (job.done.load() < job.chunks) std::this_thread::yield();
    current_.store(nullptr);
    while (entering_.load() != 0 || job.refs.load() != 0) std::this_thread::yield();
    if (job.failed.load()) std::rethrow_exception(job.error);
  }
};

}  // namespace active_rag_kernels
