#include "framework/log/log.h"

#include <unistd.h>

#include <cmath>
#include <mutex>

namespace tarn::log {
namespace {
std::mutex g_mu;
int g_color = -1;  // -1 auto
bool g_progress_open = false;
int g_rank = 0, g_world = 1;

void close_progress_locked() {
  if (g_progress_open) {
    std::fputc('\n', stderr);
    g_progress_open = false;
  }
}
}  // namespace

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

void set_color(const std::string& mode) {
  TARN_CHECK(mode == "auto" || mode == "always" || mode == "never", "logging.color: expected auto, always or never, got \"",
             mode, "\"");
  g_color = mode == "auto" ? -1 : (mode == "always" ? 1 : 0);
}

bool color() { return g_color == -1 ? stderr_is_terminal() : g_color == 1; }

void set_rank(int rank, int world) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_rank = rank;
  g_world = world;
}

void line(const char* tag, const std::string& text) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_rank != 0) return;
  close_progress_locked();
  std::fprintf(stderr, "[%s] %s\n", tag, text.c_str());
  std::fflush(stderr);
}

void warn(const char* tag, const std::string& text) {
  std::lock_guard<std::mutex> lock(g_mu);
  close_progress_locked();
  const std::string who = g_world > 1 ? "rank " + std::to_string(g_rank) + ": " : "";
  if (color())
    std::fprintf(stderr, "[%s] \x1b[33mwarning:\x1b[0m %s%s\n", tag, who.c_str(), text.c_str());
  else
    std::fprintf(stderr, "[%s] warning: %s%s\n", tag, who.c_str(), text.c_str());
  std::fflush(stderr);
}

void progress(const char* tag, const std::string& text) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_rank != 0) return;
  if (stderr_is_terminal()) {
    std::fprintf(stderr, "\r[%s] %s\x1b[K", tag, text.c_str());
    g_progress_open = true;
  } else {
    std::fprintf(stderr, "[%s] %s\n", tag, text.c_str());
  }
  std::fflush(stderr);
}

void end_progress() {
  std::lock_guard<std::mutex> lock(g_mu);
  close_progress_locked();
}

std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long long t = static_cast<long long>(s + 0.5);
  char buf[32];
  if (t < 60)
    std::snprintf(buf, sizeof buf, "%llds", t);
  else if (t < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, (t % 3600) / 60);
  return buf;
}

std::string thousands(long long n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string mebibytes(long long bytes) { return thousands((bytes + (1LL << 19)) >> 20) + " MiB"; }

std::string number(const char* printf_format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, v);
  return buf;
}

}  // namespace tarn::log
