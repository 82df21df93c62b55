//! Output for the workspace's command-line tools (`relay`, `peer`, `replay`,
//! `bench`): results on stdout, errors, warnings and progress on stderr, and
//! never a panic on a closed stream.
//!
//! `std::println!` panics when stdout is a pipe whose reader has gone
//! (`replay state FILE --turn 10 | head -1`: EPIPE). Here a closed stdout is
//! quiet: the output is dropped, later writes are skipped, and the program
//! finishes with the exit status it would have had (a desync is still 3,
//! a failed verify still 1): the reader chose to stop reading, which says
//! nothing about the result. Any other failure to write stdout (a full
//! disk) is reported on stderr and ends the program with status 1, since a
//! result was lost. Writes to stderr never fail the program: diagnostics
//! are best effort.
//!
//! A binary shadows the std macros with these, so every line it prints
//! (including lines added later) goes through this module:
//!
//! ```
//! use replays::{err_print as eprint, err_println as eprintln};
//! use replays::{out_print as print, out_println as println};
//! println!("result {}", 42);
//! eprintln!("progress");
//! ```

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write found stdout closed; later writes are skipped.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes to stdout and flushes (see the module docs for errors). Use it
/// (through [`out_println!`](crate::out_println)) for results.
pub fn out(args: fmt::Arguments<'_>) {
    if stdout_closed() {
        return;
    }
    let mut stdout = io::stdout().lock();
    check(stdout.write_fmt(args).and_then(|()| stdout.flush()));
}

/// Handles the outcome of a write to stdout made through a binary's own
/// writer (`replay export`'s buffered one): a closed pipe marks stdout
/// closed and returns; any other error is reported and ends the process
/// with status 1.
pub fn check(result: io::Result<()>) {
    match result {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
        }
        Err(e) => {
            err(format_args!("cannot write to stdout: {e}\n"));
            std::process::exit(1);
        }
    }
}

/// True once stdout was found closed: a long-running producer may stop
/// early (its result can no longer be read).
#[must_use]
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Writes to stderr, ignoring failures (a closed stderr must not stop the
/// program). Use it (through [`err_println!`](crate::err_println)) for
/// errors, warnings and progress.
pub fn err(args: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// `println!` for results, through [`stdio::out`](crate::stdio::out).
#[macro_export]
macro_rules! out_println {
    () => {
        $crate::stdio::out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdio::out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for results, through [`stdio::out`](crate::stdio::out).
#[macro_export]
macro_rules! out_print {
    ($($arg:tt)*) => {
        $crate::stdio::out(format_args!($($arg)*))
    };
}

/// `eprintln!` for diagnostics, through [`stdio::err`](crate::stdio::err).
#[macro_export]
macro_rules! err_println {
    () => {
        $crate::stdio::err(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdio::err(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` for diagnostics, through [`stdio::err`](crate::stdio::err).
#[macro_export]
macro_rules! err_print {
    ($($arg:tt)*) => {
        $crate::stdio::err(format_args!($($arg)*))
    };
}
