// checkpoint_io_testing.h — fault hooks for the checkpoint tests only.
//
// Compiled into libjobflow only when the build sets `-Dtest_hooks=true`
// (scripts/test does; packages and `meson install` builds never do), so a
// deployed library has no way to be made to crash mid-save. Nothing reads
// the environment. Tests check kEnabled and skip when the hooks are absent.
#pragma once

namespace jobflow::checkpoint_io::testing {

#ifdef JOBFLOW_TEST_HOOKS
inline constexpr bool kEnabled = true;
// The next save() of this process exits it (status 86) after `files`
// files were written, as a kill during the save would; -1 turns it off.
void crash_after_files(long files);
// true: save() swaps with two plain renames even where RENAME_EXCHANGE works.
void force_plain_rename(bool on);
#else
inline constexpr bool kEnabled = false;
inline void crash_after_files(long) {}
inline void force_plain_rename(bool) {}
#endif

}  // namespace jobflow::checkpoint_io::testing
