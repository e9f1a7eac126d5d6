//! Handing memory the process freed back to the system.
//!
//! glibc's malloc keeps what was freed in the arena it came from and returns
//! pages to the system only from the top of an arena, so after a burst (a wave
//! of connections, each with its buffers, that closed again) the freed pages
//! stay resident below the allocations that outlived it, long after the
//! connections are gone (`benches/conn-waves.sh` measures it; the README's
//! "Scale" section has the figures). `malloc_trim` walks every arena and
//! returns the free pages inside it too.
//!
//! This is the crate's one `unsafe` block: the rest of the workspace forbids it.

/// Asks the allocator to return the memory it holds free to the system;
/// `true` when it returned some. It walks and locks every arena in turn
/// (milliseconds on a large heap), so run it off the executor threads
/// ([`crate::unblock`]) and not on every free. Elsewhere than on glibc it does
/// nothing and returns `false` (musl has no such call; other platforms'
/// allocators are not asked).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn release_free_memory() -> bool {
    // SAFETY: malloc_trim takes no pointers and touches only glibc's own free
    // lists, under the locks every other allocator call takes.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// See the glibc version: nothing to do here.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn releasing_memory_after_a_burst_of_frees_is_safe() {
        // A burst of 64 KiB allocations (below glibc's mmap threshold, so in an
        // arena) freed below allocations made after them, as a wave of
        // connections leaves them: glibc can give those pages back only through
        // the trim, and says it did; every allocation still works after it.
        let mut v: Vec<Vec<u8>> = (0..2_000).map(|i| vec![i as u8; 64 * 1024]).collect();
        let keep: Vec<Vec<u8>> = v.iter().step_by(100).cloned().collect();
        v.clear();
        v.shrink_to_fit();
        let released = super::release_free_memory();
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        assert!(
            released,
            "128 MB freed below live allocations, nothing released"
        );
        #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
        assert!(!released);
        assert!(keep
            .iter()
            .enumerate()
            .all(|(i, b)| b.iter().all(|&x| x == (i * 100) as u8)));
        let again = vec![7u8; 1 << 20];
        assert_eq!(again.iter().map(|&x| u64::from(x)).sum::<u64>(), 7 << 20);
    }
}
