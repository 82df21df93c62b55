//! Where the replay tool writes: results to `out`, diagnostics to `err`.
//!
//! The same rules as [`crate::stdio`], for any pair of writers: a closed
//! `out` (EPIPE, `| head`) is quiet, drops later output and keeps the exit
//! status (the reader chose to stop, which says nothing about the result);
//! any other failure to write `out` is reported on `err` and turns the exit
//! status into 1, since a result was lost. Writes to `err` never fail the
//! tool.

use std::fmt;
use std::io::{self, Write};

/// The tool's two output streams and what went wrong writing them.
pub(crate) struct Console<'a> {
    out: &'a mut dyn Write,
    err: &'a mut dyn Write,
    /// `out` was found closed: later results are dropped.
    out_closed: bool,
    /// `out` failed otherwise: the result is lost (exit 1).
    out_failed: Option<io::Error>,
}

/// `println!` to a [`Console`]'s results stream.
macro_rules! outln {
    ($c:expr) => {
        $c.out(format_args!("\n"))
    };
    ($c:expr, $($arg:tt)*) => {
        $c.out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` to a [`Console`]'s diagnostics stream.
macro_rules! errln {
    ($c:expr, $($arg:tt)*) => {
        $c.err(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {errln, outln};

impl<'a> Console<'a> {
    pub(crate) fn new(out: &'a mut dyn Write, err: &'a mut dyn Write) -> Self {
        Self {
            out,
            err,
            out_closed: false,
            out_failed: None,
        }
    }

    /// Writes a result (see the module docs for failures).
    pub(crate) fn out(&mut self, args: fmt::Arguments<'_>) {
        if self.out_closed || self.out_failed.is_some() {
            return;
        }
        let r = self.out.write_fmt(args);
        self.check(r);
    }

    /// Writes a diagnostic, ignoring failures.
    pub(crate) fn err(&mut self, args: fmt::Arguments<'_>) {
        let _ = self.err.write_fmt(args);
        let _ = self.err.flush();
    }

    /// Flushes `out`, so that an error reported next follows the results
    /// already printed (`out` is buffered).
    pub(crate) fn flush_out(&mut self) {
        if !self.out_closed && self.out_failed.is_none() {
            let r = self.out.flush();
            self.check(r);
        }
    }

    fn check(&mut self, r: io::Result<()>) {
        match r {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => self.out_closed = true,
            Err(e) => self.out_failed = Some(e),
        }
    }

    /// Flushes `out` and returns the exit status: `code`, or 1 when a
    /// result could not be written.
    pub(crate) fn finish(mut self, code: u8) -> u8 {
        self.flush_out();
        match self.out_failed.take() {
            Some(e) => {
                errln!(self, "cannot write to stdout: {e}");
                1
            }
            None => code,
        }
    }
}
