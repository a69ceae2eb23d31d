//! Shaping: admissions held until their slot, `max_waiting`, with counting and across slots.

mod basics;
mod count;
mod cross;
