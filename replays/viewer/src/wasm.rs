//! The WebAssembly ABI the page calls: plain functions over numbers, with
//! bytes and text passed through two buffers in the module's memory (the
//! page writes the recording into [`viewer_input`]'s buffer, and reads JSON
//! from [`viewer_output`] / [`viewer_output_len`] and shapes from
//! [`viewer_shapes`] (length from [`viewer_draw`])). No wasm-bindgen: a dozen
//! functions do not need a code generator and its matching CLI in CI.
//!
//! The exports need `#[unsafe(no_mangle)]`, which the `unsafe_code` lint
//! counts; there is no unsafe block here, and the pointers handed out are
//! only read and written by the page through `WebAssembly.Memory`.
#![allow(unsafe_code)]
// Exported to JavaScript by name, not to Rust crates.
#![allow(unreachable_pub)]

use crate::View;
use serde_json::{Value, json};
use std::cell::RefCell;

#[derive(Default)]
struct State {
    input: Vec<u8>,
    output: Vec<u8>,
    shapes: Vec<i32>,
    view: Option<Box<dyn View>>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

fn with<T>(f: impl FnOnce(&mut State) -> T) -> T {
    STATE.with(|s| f(&mut s.borrow_mut()))
}

fn answer(state: &mut State, v: &Value) {
    state.output = v.to_string().into_bytes();
}

fn no_recording() -> Value {
    json!({"error": "no recording is open"})
}

/// Makes the input buffer `len` bytes long and returns where it starts.
#[unsafe(no_mangle)]
pub extern "C" fn viewer_input(len: usize) -> *mut u8 {
    with(|s| {
        s.input.clear();
        s.input.resize(len, 0);
        s.input.as_mut_ptr()
    })
}

/// Where the last JSON answer starts.
#[unsafe(no_mangle)]
pub extern "C" fn viewer_output() -> *const u8 {
    with(|s| s.output.as_ptr())
}

/// The last JSON answer's length in bytes.
#[unsafe(no_mangle)]
pub extern "C" fn viewer_output_len() -> usize {
    with(|s| s.output.len())
}

/// Opens the recording in the input buffer; answers with its info, or
/// `{"error": ...}`. Returns 1 when it opened.
#[unsafe(no_mangle)]
pub extern "C" fn viewer_open() -> i32 {
    with(|s| {
        let bytes = std::mem::take(&mut s.input);
        match crate::open(bytes) {
            Ok(view) => {
                let info = view.info();
                s.view = Some(view);
                answer(s, &info);
                1
            }
            Err(e) => {
                s.view = None;
                answer(s, &json!({"error": e.to_string()}));
                0
            }
        }
    })
}

fn call(f: impl FnOnce(&mut dyn View) -> Value) -> i32 {
    with(|s| {
        let v = match s.view.as_deref_mut() {
            Some(view) => f(view),
            None => no_recording(),
        };
        let ok = v.get("error").is_none_or(Value::is_null);
        answer(s, &v);
        i32::from(ok)
    })
}

/// Shows the world after `turn`; answers with [`View::state`].
#[unsafe(no_mangle)]
pub extern "C" fn viewer_seek(turn: u32) -> i32 {
    call(|v| match v.seek(turn) {
        Ok(()) => v.state(),
        Err(e) => json!({"error": e.to_string()}),
    })
}

/// Steps over up to `turns` turn records; answers with [`View::state`].
#[unsafe(no_mangle)]
pub extern "C" fn viewer_advance(turns: u32) -> i32 {
    call(|v| {
        for _ in 0..turns {
            match v.advance() {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return json!({"error": e.to_string()}),
            }
        }
        v.state()
    })
}

/// Answers with [`View::state`].
#[unsafe(no_mangle)]
pub extern "C" fn viewer_state() -> i32 {
    call(|v| v.state())
}

/// Runs the background pass over up to `turns` turn records; answers with
/// [`View::index_state`].
#[unsafe(no_mangle)]
pub extern "C" fn viewer_index(turns: u32) -> i32 {
    call(|v| {
        v.index(turns);
        v.index_state()
    })
}

/// Answers with [`View::index_hashes`] from the `from`th hash on.
#[unsafe(no_mangle)]
pub extern "C" fn viewer_index_hashes(from: u32) -> i32 {
    call(|v| v.index_hashes(usize::try_from(from).unwrap_or(usize::MAX)))
}

/// Appends the input buffer's bytes to the open recording (a live view's
/// next records); answers with [`View::info`], or `{"error": ...}`.
#[unsafe(no_mangle)]
pub extern "C" fn viewer_append() -> i32 {
    let more = with(|s| std::mem::take(&mut s.input));
    call(|v| match v.append(&more) {
        Ok(()) => v.info(),
        Err(e) => json!({"error": e.to_string()}),
    })
}

/// Answers with [`View::figures`].
#[unsafe(no_mangle)]
pub extern "C" fn viewer_figures() -> i32 {
    call(|v| v.figures())
}

/// Answers with [`View::verify`].
#[unsafe(no_mangle)]
pub extern "C" fn viewer_verify() -> i32 {
    call(|v| v.verify())
}

/// Answers with [`View::entities`] of the section named by the input
/// buffer's UTF-8 text.
#[unsafe(no_mangle)]
pub extern "C" fn viewer_entities(limit: u32) -> i32 {
    let section = with(|s| String::from_utf8_lossy(&s.input).into_owned());
    call(|v| v.entities(&section, usize::try_from(limit).unwrap_or(usize::MAX)))
}

/// Draws the shown world into the shape buffer; returns its length in `i32`s.
#[unsafe(no_mangle)]
pub extern "C" fn viewer_draw() -> usize {
    with(|s| {
        s.shapes.clear();
        if let Some(view) = s.view.as_deref() {
            view.draw(&mut s.shapes);
        }
        s.shapes.len()
    })
}

/// Where the shape buffer starts (valid until the next call).
#[unsafe(no_mangle)]
pub extern "C" fn viewer_shapes() -> *const i32 {
    with(|s| s.shapes.as_ptr())
}
