//! The prefix cache: a radix tree over the token prefixes whose KV cells
//! are kept after their requests, each entry held by a sequence id of its
//! own (a *holder*) so that its cells stay in the unified cache.
//!
//! A new request's prompt walks the tree; the longest cached prefix is
//! shared into the request's sequence with `seq_cp` (no K/V copied or
//! computed). Entries share cells where their prefixes were shared, so the
//! tree's branching is also the cache's: a system prompt under a hundred
//! conversations is stored once. Entries are evicted least recently used
//! when the engine needs cells or holder ids; evicting an entry frees only
//! the cells no other sequence holds.
//!
//! This module is the bookkeeping only (which holder caches which tokens);
//! the engine applies the matching cache operations.

use std::collections::HashMap;

use strata_models::SeqId;

type NodeId = usize;

#[derive(Debug)]
struct Node {
    /// The tokens on the edge from the parent.
    edge: Vec<u32>,
    parent: Option<NodeId>,
    /// Children by the first token of their edge.
    children: HashMap<u32, NodeId>,
    /// The entry ending here: its holder and when it was last used.
    entry: Option<(SeqId, u64)>,
}

/// A match of a prompt against the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Match {
    /// Tokens of the prompt found cached (positions `0..len`).
    pub len: usize,
    /// The holder whose cells cover those positions.
    pub holder: SeqId,
}

/// What [`PrefixCache::insert`] asks the engine to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inserted {
    /// The new entry was kept (else it is covered by a longer one and
    /// its holder is in `free`).
    pub kept: bool,
    /// Holders whose entries are gone: remove their cells (`seq_rm`) and
    /// return them to the pool.
    pub free: Vec<SeqId>,
}

/// The radix tree of cached prefixes (module docs).
#[derive(Debug)]
pub struct PrefixCache {
    nodes: Vec<Node>,
    free_nodes: Vec<NodeId>,
    clock: u64,
    entries: usize,
}

impl Default for PrefixCache {
    fn default() -> PrefixCache {
        PrefixCache::new()
    }
}

impl PrefixCache {
    /// An empty cache.
    pub fn new() -> PrefixCache {
        PrefixCache {
            nodes: vec![Node {
                edge: Vec::new(),
                parent: None,
                children: HashMap::new(),
                entry: None,
            }],
            free_nodes: Vec::new(),
            clock: 0,
            entries: 0,
        }
    }

    /// Entries cached.
    pub fn len(&self) -> usize {
        self.entries
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    fn alloc(&mut self, node: Node) -> NodeId {
        match self.free_nodes.pop() {
            Some(id) => {
                self.nodes[id] = node;
                id
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        }
    }

    /// Walks `tokens` from the root: the deepest node reached, how many
    /// tokens matched, and how far into that node's edge the match ends
    /// (the edge's length when it matched whole).
    fn walk(&self, tokens: &[u32]) -> (NodeId, usize, usize) {
        let mut node = 0;
        let mut i = 0;
        loop {
            let Some(&first) = tokens.get(i) else {
                return (node, i, self.nodes[node].edge.len());
            };
            let Some(&child) = self.nodes[node].children.get(&first) else {
                return (node, i, self.nodes[node].edge.len());
            };
            let edge = &self.nodes[child].edge;
            let common = edge
                .iter()
                .zip(&tokens[i..])
                .take_while(|(a, b)| a == b)
                .count();
            i += common;
            if common < edge.len() {
                return (child, i, common);
            }
            node = child;
        }
    }

    /// Any entry at or below `node`: (holder, node).
    fn entry_below(&self, mut node: NodeId) -> Option<(SeqId, NodeId)> {
        loop {
            if let Some((h, _)) = self.nodes[node].entry {
                return Some((h, node));
            }
            node = *self.nodes[node].children.values().next()?;
        }
    }

    /// The longest cached prefix of `tokens`, at most `max_len` tokens,
    /// and marks its entry used. `None` when nothing matches.
    pub fn lookup(&mut self, tokens: &[u32], max_len: usize) -> Option<Match> {
        let tokens = &tokens[..max_len.min(tokens.len())];
        let (node, len, _) = self.walk(tokens);
        if len == 0 {
            return None;
        }
        let (holder, at) = self.entry_below(node)?;
        self.clock += 1;
        if let Some(e) = &mut self.nodes[at].entry {
            e.1 = self.clock;
        }
        Some(Match { len, holder })
    }

    /// Caches `tokens` (positions `0..len`) held by `holder`. Entries on the
    /// way (shorter prefixes of `tokens`) are dropped: the new one covers
    /// them. If a longer entry already covers `tokens`, the new one is not
    /// kept.
    pub fn insert(&mut self, tokens: &[u32], holder: SeqId) -> Inserted {
        let mut out = Inserted::default();
        if tokens.is_empty() {
            out.free.push(holder);
            return out;
        }
        let (mut node, matched, into) = self.walk(tokens);
        let inside = into < self.nodes[node].edge.len();
        if matched == tokens.len()
            && (inside || !self.nodes[node].children.is_empty() || self.nodes[node].entry.is_some())
        {
            // `tokens` ends inside the tree: an entry at or below covers it
            if let Some((_, at)) = self.entry_below(node) {
                self.clock += 1;
                if let Some(e) = &mut self.nodes[at].entry {
                    e.1 = self.clock;
                }
            }
            out.free.push(holder);
            return out;
        }
        if inside {
            // split the edge of `node` after `into` tokens
            let parent = self.nodes[node].parent.unwrap_or(0);
            let tail = self.nodes[node].edge.split_off(into);
            let head = std::mem::take(&mut self.nodes[node].edge);
            let first = head[0];
            let mid = self.alloc(Node {
                edge: head,
                parent: Some(parent),
                children: HashMap::from([(tail[0], node)]),
                entry: None,
            });
            self.nodes[node].edge = tail;
            self.nodes[node].parent = Some(mid);
            self.nodes[parent].children.insert(first, mid);
            node = mid;
        }
        if matched < tokens.len() {
            let leaf = self.alloc(Node {
                edge: tokens[matched..].to_vec(),
                parent: Some(node),
                children: HashMap::new(),
                entry: None,
            });
            self.nodes[node].children.insert(tokens[matched], leaf);
            node = leaf;
        }
        self.clock += 1;
        self.nodes[node].entry = Some((holder, self.clock));
        self.entries += 1;
        out.kept = true;
        // drop the entries of the shorter prefixes on the path
        let mut up = self.nodes[node].parent;
        while let Some(p) = up {
            if let Some((h, _)) = self.nodes[p].entry.take() {
                self.entries -= 1;
                out.free.push(h);
            }
            up = self.nodes[p].parent;
        }
        out
    }

    /// Removes the least recently used entry and returns its holder.
    pub fn evict_lru(&mut self) -> Option<SeqId> {
        let (at, holder) = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.entry.map(|(h, t)| (t, i, h)))
            .min()
            .map(|(_, i, h)| (i, h))?;
        self.remove_at(at);
        Some(holder)
    }

    /// Removes the entry held by `holder`, if any.
    pub fn remove(&mut self, holder: SeqId) -> bool {
        let at = self
            .nodes
            .iter()
            .enumerate()
            .find(|(_, n)| n.entry.is_some_and(|e| e.0 == holder))
            .map(|(i, _)| i);
        match at {
            Some(i) => {
                self.remove_at(i);
                true
            }
            None => false,
        }
    }

    fn remove_at(&mut self, at: NodeId) {
        self.nodes[at].entry = None;
        self.entries -= 1;
        // prune empty leaves upwards, then merge a lone child into its parent
        let mut node = at;
        while node != 0 && self.nodes[node].entry.is_none() && self.nodes[node].children.is_empty()
        {
            let parent = self.nodes[node].parent.unwrap_or(0);
            let first = self.nodes[node].edge[0];
            self.nodes[parent].children.remove(&first);
            self.nodes[node].edge = Vec::new();
            self.free_nodes.push(node);
            node = parent;
        }
        if node != 0 && self.nodes[node].entry.is_none() && self.nodes[node].children.len() == 1 {
            let child = *self.nodes[node].children.values().next().unwrap_or(&0);
            let tail = std::mem::take(&mut self.nodes[child].edge);
            let mut edge = std::mem::take(&mut self.nodes[node].edge);
            edge.extend_from_slice(&tail);
            let parent = self.nodes[node].parent.unwrap_or(0);
            self.nodes[child].edge = edge;
            self.nodes[child].parent = Some(parent);
            let first = self.nodes[child].edge[0];
            self.nodes[parent].children.insert(first, child);
            self.nodes[node].children.clear();
            self.free_nodes.push(node);
        }
    }

    /// Every entry: its tokens and holder (tests and metrics).
    pub fn entries(&self) -> Vec<(Vec<u32>, SeqId)> {
        let mut out = Vec::new();
        let mut stack = vec![(0usize, Vec::new())];
        while let Some((n, mut path)) = stack.pop() {
            path.extend_from_slice(&self.nodes[n].edge);
            if let Some((h, _)) = self.nodes[n].entry {
                out.push((path.clone(), h));
            }
            for &c in self.nodes[n].children.values() {
                stack.push((c, path.clone()));
            }
        }
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn longest_prefix_and_sharing() {
        let mut c = PrefixCache::new();
        assert_eq!(c.lookup(&[1, 2, 3], 3), None);
        assert!(c.insert(&[1, 2, 3, 4], 10).kept);
        assert_eq!(
            c.lookup(&[1, 2, 3, 9], 4),
            Some(Match { len: 3, holder: 10 })
        );
        // capped: at least one token left to compute
        assert_eq!(
            c.lookup(&[1, 2, 3, 4], 3),
            Some(Match { len: 3, holder: 10 })
        );
        assert!(c.insert(&[1, 2, 7], 11).kept);
        let m = c.lookup(&[1, 2, 8], 3).unwrap();
        assert_eq!(m.len, 2);
        assert!(m.holder == 10 || m.holder == 11);
        assert_eq!(
            c.lookup(&[1, 2, 7, 7], 4),
            Some(Match { len: 3, holder: 11 })
        );
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_longer_entry_replaces_its_prefixes() {
        let mut c = PrefixCache::new();
        c.insert(&[1, 2], 5);
        let r = c.insert(&[1, 2, 3], 6);
        assert_eq!(
            r,
            Inserted {
                kept: true,
                free: vec![5]
            }
        );
        // a prefix of a cached entry is not kept
        let r = c.insert(&[1, 2], 7);
        assert_eq!(
            r,
            Inserted {
                kept: false,
                free: vec![7]
            }
        );
        assert_eq!(c.entries(), vec![(vec![1, 2, 3], 6)]);
    }

    #[test]
    fn lru_eviction_order() {
        let mut c = PrefixCache::new();
        c.insert(&[1], 1);
        c.insert(&[2], 2);
        c.insert(&[3], 3);
        c.lookup(&[1, 5], 2); // 1 becomes the most recent
        assert_eq!(c.evict_lru(), Some(2));
        assert_eq!(c.evict_lru(), Some(3));
        assert_eq!(c.evict_lru(), Some(1));
        assert_eq!(c.evict_lru(), None);
        assert!(c.is_empty());
    }

    /// A reference: the entries as a plain list.
    fn reference_match(entries: &[(Vec<u32>, SeqId)], p: &[u32]) -> usize {
        entries
            .iter()
            .map(|(t, _)| t.iter().zip(p).take_while(|(a, b)| a == b).count())
            .max()
            .unwrap_or(0)
    }

    proptest! {
        #[test]
        fn matches_the_list_reference(
            ops in proptest::collection::vec(
                (0u8..4, proptest::collection::vec(0u32..3, 0..8)), 1..60)
        ) {
            let mut c = PrefixCache::new();
            let mut next: SeqId = 0;
            for (op, toks) in ops {
                match op {
                    0 | 1 => {
                        next += 1;
                        let before = c.entries();
                        let r = c.insert(&toks, next);
                        // the freed holders are exactly the entries gone
                        let after = c.entries();
                        let mut gone: Vec<SeqId> = before.iter().map(|e| e.1)
                            .filter(|h| !after.iter().any(|a| a.1 == *h)).collect();
                        if !r.kept { gone.push(next); }
                        let mut free = r.free.clone();
                        free.sort();
                        gone.sort();
                        prop_assert_eq!(free, gone);
                    }
                    2 => {
                        let want = reference_match(&c.entries(), &toks);
                        let got = c.lookup(&toks, toks.len());
                        prop_assert_eq!(got.map_or(0, |m| m.len), want);
                        if let Some(m) = got {
                            // the holder's entry really covers the match
                            let e = c.entries();
                            let held = e.iter().find(|x| x.1 == m.holder).unwrap();
                            prop_assert!(held.0.len() >= m.len);
                            prop_assert_eq!(&held.0[..m.len], &toks[..m.len]);
                        }
                    }
                    _ => {
                        let n = c.len();
                        let h = c.evict_lru();
                        prop_assert_eq!(h.is_some(), n > 0);
                        prop_assert_eq!(c.len(), n.saturating_sub(1));
                    }
                }
                // no entry is a prefix of another
                let e = c.entries();
                prop_assert_eq!(e.len(), c.len());
                for a in &e {
                    for b in &e {
                        if a != b {
                            prop_assert!(!b.0.starts_with(&a.0));
                        }
                    }
                }
            }
        }
    }
}
