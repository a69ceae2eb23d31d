//! The module's allocator on wasm32: small blocks come from free lists, one
//! per size class, and go back to them, so that a request's few short-lived
//! allocations (its plan, key, headers) cost a pointer swap each instead of
//! a trip through the C library's `malloc` and `free` (dlmalloc, which the
//! V8 profile put at 15 % of a synced decision's compute: docs/performance.md).
//!
//! A block of a class is carved from the backing allocator once, at the
//! class's size, and reused for any request of that class after it is
//! freed. Each list keeps at most [`KEEP`] blocks; a block freed beyond that
//! goes back to the backing allocator, so what a burst leaves behind is
//! bounded (about 1.4 MiB over all classes). Larger or over-aligned
//! requests go straight to the backing allocator.
//!
//! The module runs on one thread (wasm32 without the atomics feature), so the
//! lists need no lock, and only there is the type `Sync` (what a global
//! allocator must be); on the host it is only tested, not installed.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::ptr;

/// The class sizes, in bytes: multiples of [`ALIGN`].
const CLASSES: [usize; 10] = [16, 32, 48, 64, 96, 128, 192, 256, 384, 512];
/// The largest size a list serves: the last class.
const MAX: usize = last(&CLASSES);
/// Every block's alignment.
const ALIGN: usize = 16;
/// Blocks kept per list at most.
pub const KEEP: usize = 256;

// Evaluated at compile time: an index out of range fails the build.
#[allow(clippy::indexing_slicing)]
const fn last(classes: &[usize]) -> usize {
    classes[classes.len() - 1]
}

/// The class of each size in steps of 16 bytes: `BY_STEP[(size + 15) / 16]`.
const BY_STEP: [u8; MAX / ALIGN + 1] = by_step();

// Evaluated at compile time: an index out of range fails the build.
#[allow(clippy::indexing_slicing)]
const fn by_step() -> [u8; MAX / ALIGN + 1] {
    let mut out = [0u8; MAX / ALIGN + 1];
    let (mut step, mut class) = (0, 0);
    while step < out.len() {
        while CLASSES[class] < step * ALIGN {
            class += 1;
        }
        out[step] = class as u8;
        step += 1;
    }
    out
}

/// The class of `layout`, if a list serves it.
fn class_of(layout: Layout) -> Option<usize> {
    if layout.align() > ALIGN || layout.size() > MAX {
        return None;
    }
    BY_STEP.get(layout.size().div_ceil(ALIGN)).map(|c| usize::from(*c))
}

/// A freed block, holding the next one of its list.
struct Free {
    next: *mut Free,
}

/// One class's free blocks.
#[derive(Clone, Copy)]
struct List {
    head: *mut Free,
    len: usize,
}

/// Free lists over the backing allocator `B`.
pub struct Blocks<B> {
    lists: UnsafeCell<[List; CLASSES.len()]>,
    backing: B,
}

// SAFETY: wasm32 without the atomics feature has one thread, so no two
// calls can overlap. Elsewhere the type is not `Sync`: a host test owns its
// instance, and nothing can share one across threads.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
unsafe impl<B: Sync> Sync for Blocks<B> {}

impl<B> Blocks<B> {
    pub const fn new(backing: B) -> Self {
        let empty = List { head: ptr::null_mut(), len: 0 };
        Blocks { lists: UnsafeCell::new([empty; CLASSES.len()]), backing }
    }

    /// Blocks kept in each list, smallest class first.
    pub fn kept(&self) -> [usize; CLASSES.len()] {
        // SAFETY: one thread (see `Sync`), and no reference into the lists
        // outlives a call.
        unsafe { (*self.lists.get()).map(|l| l.len) }
    }

    /// The list of `class`.
    ///
    /// # Safety
    /// One thread at a time, and the reference dropped before the next call.
    #[allow(clippy::mut_from_ref)]
    unsafe fn list(&self, class: usize) -> Option<&mut List> {
        (*self.lists.get()).get_mut(class)
    }
}

/// The layout the backing allocator sees for a block of `class`.
fn block(class: usize) -> Layout {
    let size = CLASSES.get(class).copied().unwrap_or(MAX);
    // SAFETY: every class size is a non-zero multiple of ALIGN, a power of two.
    unsafe { Layout::from_size_align_unchecked(size, ALIGN) }
}

unsafe impl<B: GlobalAlloc> GlobalAlloc for Blocks<B> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some((class, list)) = class_of(layout).and_then(|c| Some((c, self.list(c)?))) else {
            return self.backing.alloc(layout);
        };
        let head = list.head;
        if head.is_null() {
            return self.backing.alloc(block(class));
        }
        list.head = (*head).next;
        list.len -= 1;
        head.cast()
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some((class, list)) = class_of(layout).and_then(|c| Some((c, self.list(c)?))) else {
            return self.backing.dealloc(ptr, layout);
        };
        if list.len >= KEEP {
            return self.backing.dealloc(ptr, block(class));
        }
        let free = ptr.cast::<Free>();
        (*free).next = list.head;
        list.head = free;
        list.len += 1;
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = Layout::from_size_align_unchecked(new_size, layout.align());
        match (class_of(layout), class_of(new)) {
            // The block already has room.
            (Some(old), Some(class)) if old == class => ptr,
            (None, None) => self.backing.realloc(ptr, layout, new_size),
            _ => {
                let out = self.alloc(new);
                if !out.is_null() {
                    ptr::copy_nonoverlapping(ptr, out, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests;
