//! A request seen through its callbacks' reads ([`Source`]), each header that
//! the rules may read more than once ([`super::Reads::headers_kept`]) asked
//! of the source once per request however many rules (and the prefilter)
//! read it.

use super::RequestView;
use std::cell::RefCell;

/// Headers kept per request, at most: one value per name of
/// `Reads::headers_kept` (names beyond are read each time).
pub const KEPT: usize = 8;

/// What the proxy answers about one request, each answer a host call.
pub trait Source {
    /// A request header by lowercase name.
    fn read_header(&self, name: &str) -> Option<Vec<u8>>;
    /// An attribute by path.
    fn read_property(&self, path: &[String]) -> Option<Vec<u8>>;
}

/// [`RequestView`] over a [`Source`], keeping the values of `names`.
pub struct Kept<'a, S> {
    source: S,
    names: &'a [String],
    values: RefCell<[Option<Option<Vec<u8>>>; KEPT]>,
}

impl<'a, S: Source> Kept<'a, S> {
    pub fn new(source: S, names: &'a [String]) -> Self {
        Kept { source, names, values: RefCell::new(Default::default()) }
    }
}

impl<S: Source> RequestView for Kept<'_, S> {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        let Some(index) = self.names.iter().take(KEPT).position(|n| n == name) else {
            return self.source.read_header(name);
        };
        let Ok(mut values) = self.values.try_borrow_mut() else { return self.source.read_header(name) };
        let Some(entry) = values.get_mut(index) else { return self.source.read_header(name) };
        entry.get_or_insert_with(|| self.source.read_header(name)).clone()
    }

    fn property(&self, path: &[String]) -> Option<Vec<u8>> {
        self.source.read_property(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Headers `a`..`j` whose value is their name; counts the reads.
    #[derive(Default)]
    struct Counting {
        reads: Cell<usize>,
    }

    impl Source for &Counting {
        fn read_header(&self, name: &str) -> Option<Vec<u8>> {
            self.reads.set(self.reads.get() + 1);
            (name.len() == 1).then(|| name.as_bytes().to_vec())
        }
        fn read_property(&self, _path: &[String]) -> Option<Vec<u8>> {
            self.reads.set(self.reads.get() + 1);
            None
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn a_kept_header_is_read_once_and_others_each_time() {
        let names: Vec<String> = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "zz"].map(String::from).to_vec();
        let source = Counting::default();
        let view = Kept::new(&source, &names);
        for _ in 0..3 {
            assert_eq!(view.header("a").as_deref(), Some(&b"a"[..]));
            assert_eq!(view.header("zz"), None);
        }
        assert_eq!(source.reads.get(), 1 + 3, "`a` once; `zz` is past the first {KEPT}: read each time");
        assert_eq!(view.header("h").as_deref(), Some(&b"h"[..]));
        assert_eq!(view.header("h").as_deref(), Some(&b"h"[..]));
        assert_eq!(source.reads.get(), 5, "the eighth name is kept");
        view.header("x");
        view.header("x");
        assert_eq!(source.reads.get(), 7, "a name not kept is read each time");
        view.property(&["source".into(), "address".into()]);
        assert_eq!(source.reads.get(), 8);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn a_missing_kept_header_is_asked_once() {
        let names = vec!["yy".to_string()];
        let source = Counting::default();
        let view = Kept::new(&source, &names);
        assert_eq!((view.header("yy"), view.header("yy")), (None, None));
        assert_eq!(source.reads.get(), 1);
    }
}
