#pragma once
// Log lines carry a subsystem tag ("[train] ...", "[data] ..."), go to stderr, and stay plain
// when stderr is not a terminal. Progress lines overwrite themselves on a terminal.
#include <cstdio>
#include <string>

#include "kernels/check.h"

namespace tarn::log {

bool stderr_is_terminal();
// Set once from the recipe's logging.color (auto|always|never).
void set_color(const std::string& mode);
bool color();

// Data-parallel runs: only rank 0 prints lines and progress; every rank prints warnings,
// prefixed "rank R: " when world > 1. Set once, before the first line of the run.
void set_rank(int rank, int world);

void line(const char* tag, const std::string& text);   // "[tag] text\n"
void warn(const char* tag, const std::string& text);   // "[tag] warning: text\n"

template <typename... Parts>
void info(const char* tag, const Parts&... parts) {
  line(tag, str_cat(parts...));
}

// A status line that a terminal redraws in place ("\r...\x1b[K"); elsewhere a normal line.
void progress(const char* tag, const std::string& text);
void end_progress();  // moves past a redrawn line before other output

// "12m04s", "3h10m", "45s".
std::string duration(double seconds);
// "5,310" (thousands separators).
std::string thousands(long long n);
// "1,234 MiB" (rounded to the nearest mebibyte).
std::string mebibytes(long long bytes);
// `v` through one printf conversion for a double: number("%.3f", 0.58172) is "0.582".
std::string number(const char* printf_format, double v);

}  // namespace tarn::log
