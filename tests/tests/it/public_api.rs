//! The public API of every library crate (sim, replays, viewer, lockstep, relay) as
//! a sorted list of paths, pinned by an insta snapshot so that every change
//! to it shows in review.
//!
//! The list comes from the crates' sources, parsed with `syn` (the standard
//! Rust parser), on stable and without a doc build: starting at each
//! `lib.rs`, it follows `pub mod` and `pub use` (renames, groups, globs,
//! other workspace crates), skips `pub(crate)`/`pub(super)`/`pub(in ..)`,
//! `#[doc(hidden)]` and `#[cfg(test)]`, and lists for every public item its
//! kind, plus its enum variants, public fields, trait items and the public
//! inherent methods and constants of every public type, wherever their
//! `impl` block is. An item re-exported under several paths is listed under
//! each, since a user can name it by each.
//!
//! To accept an intended change: `cargo insta review` (or
//! `INSTA_UPDATE=always cargo test -p tests --test it public_api::`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::{Attribute, Item, UseTree, Visibility};

/// The workspace crates whose APIs are listed, in dependency order.
const CRATES: [(&str, &str); 5] = [
    ("sim", "sim"),
    ("replays", "replays"),
    ("viewer", "replays/viewer"),
    ("lockstep", "lockstep"),
    ("relay", "relay"),
];

/// Reads one source file; a closure so that the lister's own test can feed
/// inline sources.
type Loader<'a> = &'a dyn Fn(&Path) -> Option<String>;

/// One module of a parsed crate: its items (minus `#[cfg(test)]` ones), its
/// child modules by name and its parent.
struct Module {
    krate: usize,
    parent: Option<usize>,
    items: Vec<Item>,
    children: BTreeMap<String, usize>,
}

/// What a path resolves to.
#[derive(Clone, Debug)]
enum Target {
    Module(usize),
    /// An item: the module defining it and its name.
    Item(usize, String),
    /// Something outside the workspace crates (std, a dependency).
    External,
}

/// Every module of every parsed crate.
struct Tree {
    modules: Vec<Module>,
    /// Crate name -> root module.
    roots: BTreeMap<String, usize>,
}

fn is_cfg_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Path>()
                .is_ok_and(|p| p.is_ident("test"))
    })
}

fn is_doc_hidden(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("doc")
            && a.parse_args::<syn::Path>()
                .is_ok_and(|p| p.is_ident("hidden"))
    })
}

fn path_attr(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The name and kind of a named item, with its visibility.
fn item_name(item: &Item) -> Option<(String, &'static str, &Visibility)> {
    Some(match item {
        Item::Const(i) => (i.ident.to_string(), "const", &i.vis),
        Item::Enum(i) => (i.ident.to_string(), "enum", &i.vis),
        Item::Fn(i) => (i.sig.ident.to_string(), "fn", &i.vis),
        Item::Mod(i) => (i.ident.to_string(), "mod", &i.vis),
        Item::Static(i) => (i.ident.to_string(), "static", &i.vis),
        Item::Struct(i) => (i.ident.to_string(), "struct", &i.vis),
        Item::Trait(i) => (i.ident.to_string(), "trait", &i.vis),
        Item::TraitAlias(i) => (i.ident.to_string(), "trait alias", &i.vis),
        Item::Type(i) => (i.ident.to_string(), "type", &i.vis),
        Item::Union(i) => (i.ident.to_string(), "union", &i.vis),
        _ => return None,
    })
}

/// `use` trees flattened to (path, binding); binding `None` for a glob.
fn flatten_use(
    tree: &UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) if n.ident == "self" => {
            out.push((prefix.clone(), prefix.last().cloned()));
        }
        UseTree::Name(n) => {
            let mut path = prefix.clone();
            path.push(n.ident.to_string());
            out.push((path, Some(n.ident.to_string())));
        }
        UseTree::Rename(r) => {
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.push((path, Some(r.rename.to_string())));
        }
        UseTree::Glob(_) => out.push((prefix.clone(), None)),
        UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, out);
            }
        }
    }
}

impl Tree {
    fn new() -> Self {
        Self {
            modules: Vec::new(),
            roots: BTreeMap::new(),
        }
    }

    /// Parses the crate `name` whose root file is `root`, following `mod x;`.
    fn add_crate(&mut self, name: &str, root: &Path, load: Loader<'_>) -> Result<(), String> {
        let krate = self.roots.len();
        let dir = root.parent().map(Path::to_path_buf).unwrap_or_default();
        let id = self.add_file(krate, None, root, dir, load)?;
        self.roots.insert(name.to_string(), id);
        Ok(())
    }

    fn add_file(
        &mut self,
        krate: usize,
        parent: Option<usize>,
        file: &Path,
        dir: PathBuf,
        load: Loader<'_>,
    ) -> Result<usize, String> {
        let src = load(file).ok_or_else(|| format!("cannot read {}", file.display()))?;
        let parsed = syn::parse_file(&src).map_err(|e| format!("{}: {e}", file.display()))?;
        self.add_items(krate, parent, parsed.items, &dir, load)
    }

    fn add_items(
        &mut self,
        krate: usize,
        parent: Option<usize>,
        items: Vec<Item>,
        dir: &Path,
        load: Loader<'_>,
    ) -> Result<usize, String> {
        let id = self.modules.len();
        self.modules.push(Module {
            krate,
            parent,
            items: Vec::new(),
            children: BTreeMap::new(),
        });
        let mut kept = Vec::new();
        for item in items {
            if is_cfg_test(item_attrs(&item)) {
                continue;
            }
            if let Item::Mod(m) = &item {
                let name = m.ident.to_string();
                let child = if let Some((_, inline)) = &m.content {
                    self.add_items(krate, Some(id), inline.clone(), &dir.join(&name), load)?
                } else if let Some(p) = path_attr(&m.attrs) {
                    let file = dir.join(p);
                    let sub = file.with_extension("");
                    self.add_file(krate, Some(id), &file, sub, load)?
                } else {
                    let flat = dir.join(format!("{name}.rs"));
                    if load(&flat).is_some() {
                        self.add_file(krate, Some(id), &flat, dir.join(&name), load)?
                    } else {
                        self.add_file(
                            krate,
                            Some(id),
                            &dir.join(&name).join("mod.rs"),
                            dir.join(&name),
                            load,
                        )?
                    }
                };
                self.modules[id].children.insert(name, child);
            }
            kept.push(item);
        }
        self.modules[id].items = kept;
        Ok(id)
    }

    /// Resolves one name as seen from inside module `m`.
    fn resolve_name(&self, m: usize, name: &str, depth: usize) -> Target {
        if depth > 32 {
            return Target::External;
        }
        let module = &self.modules[m];
        if let Some(&c) = module.children.get(name) {
            return Target::Module(c);
        }
        if module
            .items
            .iter()
            .any(|i| item_name(i).is_some_and(|(n, _, _)| n == name))
        {
            return Target::Item(m, name.to_string());
        }
        let mut globs = Vec::new();
        for item in &module.items {
            let Item::Use(u) = item else { continue };
            let mut uses = Vec::new();
            flatten_use(&u.tree, &mut Vec::new(), &mut uses);
            for (path, binding) in uses {
                match binding {
                    Some(b) if b == name => return self.resolve_path(m, &path, depth + 1),
                    None => globs.push(path),
                    Some(_) => {}
                }
            }
        }
        for path in globs {
            if let Target::Module(g) = self.resolve_path(m, &path, depth + 1) {
                match self.resolve_name(g, name, depth + 1) {
                    Target::External => {}
                    found => return found,
                }
            }
        }
        if let Some(&root) = self.roots.get(name) {
            return Target::Module(root);
        }
        Target::External
    }

    /// Resolves a `use`-style path as seen from inside module `m`.
    fn resolve_path(&self, m: usize, path: &[String], depth: usize) -> Target {
        let Some((first, rest)) = path.split_first() else {
            return Target::Module(m);
        };
        let mut at = match first.as_str() {
            "crate" => Target::Module(self.crate_root(m)),
            "self" => Target::Module(m),
            "super" => self.modules[m]
                .parent
                .map_or(Target::External, Target::Module),
            name => self.resolve_name(m, name, depth),
        };
        for seg in rest {
            at = match (at, seg.as_str()) {
                (Target::Module(c), "super") => self.modules[c]
                    .parent
                    .map_or(Target::External, Target::Module),
                (Target::Module(c), name) => self.resolve_name(c, name, depth + 1),
                _ => Target::External,
            };
        }
        at
    }

    fn crate_root(&self, m: usize) -> usize {
        let krate = self.modules[m].krate;
        self.roots
            .values()
            .copied()
            .find(|&r| self.modules[r].krate == krate)
            .unwrap_or(0)
    }
}

/// The public API of one crate of `tree`: one line per public path.
struct Lister<'t> {
    tree: &'t Tree,
    lines: BTreeSet<String>,
    /// Public paths of each item, keyed by (defining module, name), for
    /// the inherent methods found later.
    item_paths: BTreeMap<(usize, String), BTreeSet<String>>,
    visiting: Vec<usize>,
}

impl<'t> Lister<'t> {
    fn list(tree: &'t Tree, krate: &str) -> Result<Vec<String>, String> {
        let root = *tree
            .roots
            .get(krate)
            .ok_or_else(|| format!("no crate {krate}"))?;
        let mut lister = Lister {
            tree,
            lines: BTreeSet::new(),
            item_paths: BTreeMap::new(),
            visiting: Vec::new(),
        };
        lister.walk(root, krate);
        lister.methods();
        Ok(lister.lines.into_iter().collect())
    }

    /// Lists the public items of module `m`, which users name as `prefix`.
    fn walk(&mut self, m: usize, prefix: &str) {
        if self.visiting.contains(&m) || self.visiting.len() > 16 {
            return;
        }
        self.visiting.push(m);
        let tree = self.tree;
        for item in &tree.modules[m].items {
            if is_doc_hidden(item_attrs(item)) {
                continue;
            }
            if let Item::Use(u) = item {
                if !matches!(u.vis, Visibility::Public(_)) {
                    continue;
                }
                let mut uses = Vec::new();
                flatten_use(&u.tree, &mut Vec::new(), &mut uses);
                for (path, binding) in uses {
                    let target = tree.resolve_path(m, &path, 0);
                    match binding {
                        Some(b) => self.emit(target, &format!("{prefix}::{b}")),
                        None => {
                            if let Target::Module(g) = target {
                                self.walk(g, prefix);
                            }
                        }
                    }
                }
                continue;
            }
            if let Item::Macro(mac) = item {
                let exported = mac.attrs.iter().any(|a| a.path().is_ident("macro_export"));
                if let (true, Some(ident)) = (exported, &mac.ident) {
                    let root = tree.crate_root(m);
                    let name = tree
                        .roots
                        .iter()
                        .find(|(_, r)| **r == root)
                        .map(|(n, _)| n.clone());
                    self.lines
                        .insert(format!("{}::{ident} (macro)", name.unwrap_or_default()));
                }
                continue;
            }
            let Some((name, _, vis)) = item_name(item) else {
                continue;
            };
            if matches!(vis, Visibility::Public(_)) {
                let target = match item {
                    Item::Mod(_) => tree.modules[m]
                        .children
                        .get(&name)
                        .map_or(Target::External, |&c| Target::Module(c)),
                    _ => Target::Item(m, name.clone()),
                };
                self.emit(target, &format!("{prefix}::{name}"));
            }
        }
        self.visiting.pop();
    }

    /// Lists what `target` is, named by users as `path`.
    fn emit(&mut self, target: Target, path: &str) {
        match target {
            Target::Module(c) => {
                self.lines.insert(format!("{path} (mod)"));
                self.walk(c, path);
            }
            Target::External => {
                self.lines.insert(format!("{path} (re-export)"));
            }
            Target::Item(defm, name) => {
                let tree = self.tree;
                let Some(item) = tree.modules[defm]
                    .items
                    .iter()
                    .find(|i| item_name(i).is_some_and(|(n, _, _)| n == name))
                else {
                    return;
                };
                let Some((_, kind, _)) = item_name(item) else {
                    return;
                };
                self.lines.insert(format!("{path} ({kind})"));
                self.members(item, path);
                self.item_paths
                    .entry((defm, name))
                    .or_default()
                    .insert(path.to_string());
            }
        }
    }

    /// Variants, public fields and trait items of `item`, named as `path`.
    fn members(&mut self, item: &Item, path: &str) {
        match item {
            Item::Enum(e) => {
                for v in &e.variants {
                    if !is_doc_hidden(&v.attrs) {
                        self.lines.insert(format!("{path}::{} (variant)", v.ident));
                    }
                }
            }
            Item::Struct(s) => {
                for f in &s.fields {
                    if let (Visibility::Public(_), Some(ident), false) =
                        (&f.vis, &f.ident, is_doc_hidden(&f.attrs))
                    {
                        self.lines.insert(format!("{path}::{ident} (field)"));
                    }
                }
            }
            Item::Trait(t) => {
                for ti in &t.items {
                    let (name, kind, attrs) = match ti {
                        syn::TraitItem::Fn(f) => (f.sig.ident.to_string(), "trait fn", &f.attrs),
                        syn::TraitItem::Const(c) => (c.ident.to_string(), "trait const", &c.attrs),
                        syn::TraitItem::Type(t) => (t.ident.to_string(), "trait type", &t.attrs),
                        _ => continue,
                    };
                    if !is_doc_hidden(attrs) && !is_cfg_test(attrs) {
                        self.lines.insert(format!("{path}::{name} ({kind})"));
                    }
                }
            }
            _ => {}
        }
    }

    /// Public inherent methods and constants of every listed type, found in
    /// any module of the crate.
    fn methods(&mut self) {
        let tree = self.tree;
        for (m, module) in tree.modules.iter().enumerate() {
            for item in &module.items {
                let Item::Impl(imp) = item else { continue };
                if imp.trait_.is_some() || is_doc_hidden(&imp.attrs) {
                    continue;
                }
                let syn::Type::Path(ty) = &*imp.self_ty else {
                    continue;
                };
                let segs: Vec<String> = ty
                    .path
                    .segments
                    .iter()
                    .map(|s| s.ident.to_string())
                    .collect();
                let Target::Item(defm, name) = tree.resolve_path(m, &segs, 0) else {
                    continue;
                };
                let Some(paths) = self.item_paths.get(&(defm, name)).cloned() else {
                    continue;
                };
                for ii in &imp.items {
                    let (ident, kind, vis, attrs) = match ii {
                        syn::ImplItem::Fn(f) => (f.sig.ident.to_string(), "fn", &f.vis, &f.attrs),
                        syn::ImplItem::Const(c) => (c.ident.to_string(), "const", &c.vis, &c.attrs),
                        _ => continue,
                    };
                    if matches!(vis, Visibility::Public(_))
                        && !is_doc_hidden(attrs)
                        && !is_cfg_test(attrs)
                    {
                        for p in &paths {
                            self.lines.insert(format!("{p}::{ident} ({kind})"));
                        }
                    }
                }
            }
        }
    }
}

/// The workspace root (this crate sits in `tests/`).
fn workspace() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).unwrap_or(here)
}

fn workspace_tree() -> Tree {
    let load = |p: &Path| std::fs::read_to_string(p).ok();
    let mut tree = Tree::new();
    for (name, dir) in CRATES {
        let root = workspace().join(dir).join("src").join("lib.rs");
        if let Err(e) = tree.add_crate(name, &root, &load) {
            panic!("parsing {name}: {e}");
        }
    }
    tree
}

fn api(tree: &Tree, krate: &str) -> String {
    match Lister::list(tree, krate) {
        Ok(lines) => lines.join("\n") + "\n",
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn sim_public_api() {
    insta::assert_snapshot!(api(&workspace_tree(), "sim"));
}

#[test]
fn replays_public_api() {
    insta::assert_snapshot!(api(&workspace_tree(), "replays"));
}

#[test]
fn viewer_public_api() {
    insta::assert_snapshot!(api(&workspace_tree(), "viewer"));
}

#[test]
fn lockstep_public_api() {
    insta::assert_snapshot!(api(&workspace_tree(), "lockstep"));
}

#[test]
fn relay_public_api() {
    insta::assert_snapshot!(api(&workspace_tree(), "relay"));
}

/// Lists an inline crate `demo` made of `files` (path -> source).
fn list_inline(files: &[(&str, &str)]) -> Vec<String> {
    let map: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(p, s)| (PathBuf::from(p), s.to_string()))
        .collect();
    let load = move |p: &Path| map.get(p).cloned();
    let mut tree = Tree::new();
    if let Err(e) = tree.add_crate("demo", Path::new("src/lib.rs"), &load) {
        panic!("{e}");
    }
    match Lister::list(&tree, "demo") {
        Ok(lines) => lines,
        Err(e) => panic!("{e}"),
    }
}

const DEMO_LIB: &str = r#"
    pub mod peer;
    mod wire;
    pub(crate) mod inner { pub fn reachable_only_in_crate() {} }
    pub use wire::{Header as WireHeader, encode};
    pub mod low { pub use crate::wire::*; }
    #[doc(hidden)]
    pub fn hidden() {}
    #[cfg(test)]
    pub mod tests { pub fn t() {} }
    pub trait Game { type Command; fn step(&mut self); const NAME: &'static str; }
"#;

const DEMO_PEER: &str = r#"
    use crate::wire::Header;
    pub struct Peer { pub name: String, secret: u8 }
    pub enum Event { Ready, Ended(u8) }
    impl Peer {
        pub fn new() -> Self { todo!() }
        pub(crate) fn internal(&self) {}
        fn private(&self) {}
        pub const MAX: u8 = 4;
    }
    impl Header { pub fn len(&self) -> usize { 0 } }
    impl Default for Peer { fn default() -> Self { todo!() } }
"#;

const DEMO_WIRE: &str = r#"
    pub struct Header;
    pub fn encode() {}
    pub(crate) fn decode() {}
"#;

#[test]
fn lister_follows_pub_mod_and_use_and_skips_private_hidden_and_test_items() {
    let lines = list_inline(&[
        ("src/lib.rs", DEMO_LIB),
        ("src/peer.rs", DEMO_PEER),
        ("src/wire.rs", DEMO_WIRE),
    ]);
    let expected = [
        "demo::Game (trait)",
        "demo::Game::NAME (trait const)",
        "demo::Game::step (trait fn)",
        "demo::Game::Command (trait type)",
        "demo::WireHeader (struct)",
        "demo::WireHeader::len (fn)",
        "demo::encode (fn)",
        "demo::low (mod)",
        "demo::low::Header (struct)",
        "demo::low::Header::len (fn)",
        "demo::low::encode (fn)",
        "demo::peer (mod)",
        "demo::peer::Event (enum)",
        "demo::peer::Event::Ended (variant)",
        "demo::peer::Event::Ready (variant)",
        "demo::peer::Peer (struct)",
        "demo::peer::Peer::MAX (const)",
        "demo::peer::Peer::name (field)",
        "demo::peer::Peer::new (fn)",
    ];
    let mut expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    expected.sort();
    assert_eq!(lines, expected);
}

#[test]
fn lister_sees_an_added_or_removed_pub_item() {
    let base = list_inline(&[
        ("src/lib.rs", DEMO_LIB),
        ("src/peer.rs", DEMO_PEER),
        ("src/wire.rs", DEMO_WIRE),
    ]);
    let added_peer = DEMO_PEER.replace("fn private(&self) {}", "pub fn now_public(&self) {}");
    let added = list_inline(&[
        ("src/lib.rs", DEMO_LIB),
        ("src/peer.rs", &added_peer),
        ("src/wire.rs", DEMO_WIRE),
    ]);
    let new: Vec<_> = added.iter().filter(|l| !base.contains(l)).collect();
    assert_eq!(new, ["demo::peer::Peer::now_public (fn)"]);

    let removed_peer = DEMO_PEER.replace("pub fn new()", "fn new()");
    let removed = list_inline(&[
        ("src/lib.rs", DEMO_LIB),
        ("src/peer.rs", &removed_peer),
        ("src/wire.rs", DEMO_WIRE),
    ]);
    let gone: Vec<_> = base.iter().filter(|l| !removed.contains(l)).collect();
    assert_eq!(gone, ["demo::peer::Peer::new (fn)"]);
}
