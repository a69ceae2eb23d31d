//! The free lists against the backing allocator: blocks are reused, never
//! shared, keep their contents through `realloc`, and what is kept is
//! bounded.

use super::{Blocks, CLASSES, KEEP, MAX};
use std::alloc::{GlobalAlloc, Layout, System};

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

#[test]
fn a_freed_block_serves_the_next_request_of_its_class() {
    let blocks = Blocks::new(System);
    unsafe {
        let a = blocks.alloc(layout(40, 8));
        blocks.dealloc(a, layout(40, 8));
        assert_eq!(blocks.kept()[2], 1, "a 40-byte block is kept in the 48-byte list");
        let b = blocks.alloc(layout(33, 1));
        assert_eq!(a, b, "the same class reuses the block");
        assert_eq!(blocks.kept()[2], 0);
        let c = blocks.alloc(layout(40, 8));
        assert_ne!(b, c, "a block in use is never handed out again");
        blocks.dealloc(b, layout(33, 1));
        blocks.dealloc(c, layout(40, 8));
    }
}

#[test]
fn every_class_is_aligned_and_holds_its_size() {
    let blocks = Blocks::new(System);
    for size in 1..=MAX {
        for align in [1, 2, 4, 8, 16] {
            unsafe {
                let p = blocks.alloc(layout(size, align));
                assert!(!p.is_null());
                assert_eq!(p as usize % 16, 0, "size {size} align {align}");
                std::ptr::write_bytes(p, 0xab, size);
                blocks.dealloc(p, layout(size, align));
            }
        }
    }
    assert!(blocks.kept().iter().all(|&n| n == 1), "one block per class: {:?}", blocks.kept());
}

#[test]
fn large_and_over_aligned_requests_bypass_the_lists() {
    let blocks = Blocks::new(System);
    unsafe {
        for l in [layout(MAX + 1, 8), layout(4096, 8), layout(64, 64)] {
            let p = blocks.alloc(l);
            assert_eq!(p as usize % l.align(), 0);
            blocks.dealloc(p, l);
        }
    }
    assert_eq!(blocks.kept(), [0; CLASSES.len()]);
}

#[test]
fn realloc_keeps_the_contents_within_and_across_classes() {
    let blocks = Blocks::new(System);
    unsafe {
        let mut size = 5;
        let mut p = blocks.alloc(layout(size, 1));
        for i in 0..size {
            *p.add(i) = i as u8;
        }
        for next in [12, 16, 17, 100, 512, 513, 2000, 300, 7] {
            let q = blocks.realloc(p, layout(size, 1), next);
            let same_class = super::class_of(layout(size, 1)) == super::class_of(layout(next, 1));
            if same_class && super::class_of(layout(next, 1)).is_some() {
                assert_eq!(p, q, "{size} -> {next} stays in its block");
            }
            for i in 0..size.min(next) {
                assert_eq!(*q.add(i), i as u8, "byte {i} after {size} -> {next}");
            }
            for i in size.min(next)..next {
                *q.add(i) = i as u8;
            }
            (p, size) = (q, next);
        }
        blocks.dealloc(p, layout(size, 1));
    }
}

#[test]
fn a_list_keeps_at_most_its_bound() {
    let blocks = Blocks::new(System);
    let l = layout(64, 8);
    unsafe {
        let all: Vec<*mut u8> = (0..KEEP + 50).map(|_| blocks.alloc(l)).collect();
        for p in all {
            blocks.dealloc(p, l);
        }
    }
    assert_eq!(blocks.kept()[3], KEEP, "the rest went back");
}

/// Random allocations, frees and reallocs, each block filled with its own
/// byte and checked before it is freed: no two live blocks overlap.
#[test]
fn live_blocks_never_overlap() {
    let blocks = Blocks::new(System);
    let mut live: Vec<(*mut u8, usize, u8)> = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let check = |(p, size, fill): (*mut u8, usize, u8)| unsafe {
        assert!((0..size).all(|i| *p.add(i) == fill), "a block of {size} was overwritten");
    };
    for step in 0..20_000u32 {
        let r = next();
        unsafe {
            match r % 4 {
                0 | 1 if live.len() < 600 => {
                    let size = 1 + (r >> 8) as usize % 700;
                    let p = blocks.alloc(layout(size, 8));
                    let fill = step as u8;
                    std::ptr::write_bytes(p, fill, size);
                    live.push((p, size, fill));
                }
                2 if !live.is_empty() => {
                    let (p, size, fill) = live.swap_remove((r >> 8) as usize % live.len());
                    check((p, size, fill));
                    blocks.dealloc(p, layout(size, 8));
                }
                _ if !live.is_empty() => {
                    let at = (r >> 8) as usize % live.len();
                    let (p, size, fill) = live[at];
                    check((p, size, fill));
                    let new = 1 + (r >> 20) as usize % 700;
                    let q = blocks.realloc(p, layout(size, 8), new);
                    std::ptr::write_bytes(q, fill, new);
                    live[at] = (q, new, fill);
                }
                _ => {}
            }
        }
    }
    for (p, size, fill) in live {
        check((p, size, fill));
        unsafe { blocks.dealloc(p, layout(size, 8)) };
    }
}
