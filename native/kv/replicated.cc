// Replicated writes (docs/replication-design.md, scheme A): PUT, DELETE, CAS
// and INCR on a hash slot with backups. The op on the primary (the leader) has
// a follower op per backup, on that backup's connection: a PUT's or CAS's
// follower writes the same item (the leader's buffer, its version) into the
// block that backup granted; an INCR's finds (or creates) the counter on its
// replica and adds the delta there, one round before the primary does.
//
//   R1, R2   every member runs write.cc's rounds on its own replica at once:
//            the item WRITE and bucket READs, the lock CASes with the epoch READ
//   stop     each member stops with a vote (group_stop): HELD (locks held,
//            decided), RETRY (locks given back) or DONE (locks given back, an
//            answer); a follower's DONE ends it
//   decide   once every member stopped (group_decide): the leader's DONE or a
//            follower's failure → everyone gives its locks back, the leader
//            answers; any RETRY → the same, then the group retries together
//            after the leader's backoff; all HELD → R3
//   R3       the followers commit; once every one has ended committed,
//   R4       the leader commits, and answers.
//
// An INCR's member stops HELD either before its FETCH_AND_ADD (at_atomic: it
// holds no locks) or, creating the counter, before its commit; R3 and R4 are
// then the FETCH_AND_ADDs (or creations). Additions commute, so the replicas'
// words need no common order: a backup is ahead of its primary only by deltas
// not yet acknowledged. An add that meets a DELETE's seal added nothing anyone
// can see: if no backup added yet, the whole group starts over (it will
// create the counter afresh); once one has, adding again there could count
// twice, so the op ends as one that may have taken effect (TIMEOUT). A
// primary that has the counter while a backup lacks it (a DELETE between the
// two) makes the group wait until they agree; a backup that has it while the
// primary lacks it (its creator died between them) keeps its lead.
//
// The primary's images decide (a CAS's version, a DELETE's NOT_FOUND, a
// type); a backup's slot is made to name the new item whatever it held
// (write.cc). Readers read only the primary, and a primary commits only after
// every backup did, so anything readable is on every backup.
//
// Ownership: followers are ops of the core like any other, claimed with
// their leader in submit; they give no result. The leader answers only when
// its followers have all ended, so a follower never outlives the item buffer
// it writes from, and the answer says which backup blocks went unused.
#include "client_core.h"
#include "op.h"

namespace rkv::kv {

using Vote = GroupState::Vote;

// Why a replicated write's backups cannot run it (OK: they can).
KvStatus ClientCore::backup_refusal(const OpDesc& d) const {
  if (d.backups > kMaxBackups) return KvStatus::PROTOCOL;
  if (d.type == KvOp::GET) return KvStatus::PROTOCOL;
  const uint64_t bytes = item_bytes(d.key_len, d.value_len);
  for (uint32_t i = 0; i < d.backups; i++) {
    const OpDesc::Backup& b = d.backup[i];
    const Link* l = link_at(b.connection);
    // Each replica once: a member named twice would take its own locks twice.
    if (l == nullptr || b.connection == d.connection || (i == 1 && b.connection == d.backup[0].connection)) {
      return KvStatus::PROTOCOL;
    }
    if (d.value_len > l->region.max_value) return KvStatus::VALUE_TOO_LARGE;
    if (l->broken) return KvStatus::DISCONNECTED;
    if (d.type == KvOp::DELETE || d.type == KvOp::UNLOCK) continue;  // nothing to create
    if (d.ext_lkey == 0 && bytes > l->item_limit) return KvStatus::BUFFER_TOO_SMALL;
    if ((static_cast<uint64_t>(b.block) + b.block_units) * kUnit > l->region.heap_bytes ||
        slot_length_units(item_units(bytes)) > b.block_units) {
      return KvStatus::PROTOCOL;  // a block outside that backup's heap, or too small for the item
    }
  }
  return KvStatus::OK;
}

// The leader's followers, one per backup; claim() made sure the ops are free.
void ClientCore::attach_followers(Op& leader, const OpDesc& d) {
  const auto now = Clock::now();
  leader.group.nbackups = static_cast<uint8_t>(d.backups);
  for (uint32_t i = 0; i < d.backups; i++) {
    Op& f = ops_[free_ops_.back()];
    free_ops_.pop_back();
    busy_++;
    f.busy = true;
    OpDesc fd = d;
    fd.connection = d.backup[i].connection;
    fd.block = d.backup[i].block;
    fd.block_units = d.backup[i].block_units;
    fd.backups = 0;
    adopt(f, fd, now);
    f.group.leader = static_cast<uint8_t>(leader.index);
    f.group.backup = static_cast<uint8_t>(i);
    leader.group.followers[i] = static_cast<uint8_t>(f.index);
  }
}

// Starts the followers' first round: a PUT's or CAS's with the item the leader
// built (start()), an INCR's as start() starts one.
void ClientCore::start_followers(Op& leader) {
  if (!leader.busy || !leader.group.is_leader() || leader.group.ending) return;
  for (uint8_t index : leader.group.followers) {
    if (index == GroupState::kNone) continue;
    Op& f = ops_[index];
    if (f.is_atomic()) {
      if (cache_lookup(f)) atomic_step(f);
      else get_read_buckets(f, Phase::G_BUCKETS);
      continue;
    }
    if (f.type != KvOp::DELETE) {
      f.item = leader.item;
      f.shares_item = true;
      f.version = leader.version;
      f.write().item_units = leader.write().item_units;
    }
    write_read_buckets(f);
  }
}

// A member stopped: it holds its locks, decided (HELD), or gave them back
// to retry (RETRY) or to answer (DONE).
void ClientCore::group_stop(Op& op, Vote vote, KvStatus status, uint32_t detail) {
  op.begin(Phase::W_PARKED);
  GroupState& g = op.group;
  if (g.is_follower()) {
    if (vote == Vote::DONE) return end_follower(op, status, detail, false);
    if (g.abandoned) {
      if (vote == Vote::HELD && g.taken) return lock_undo(op);  // ends once it has given the lock word back
      if (vote == Vote::HELD && op.type == KvOp::UNLOCK && g.at_atomic && ops_[g.leader].group.release_backups) return group_go(op);
      if (vote == Vote::HELD && !g.at_atomic) return release_and_finish(op, KvStatus::DISCONNECTED);  // ends at its DONE
      return end_follower(op, status, detail, false);
    }
  }
  g.vote = vote;
  g.status = status;
  g.detail = detail;
  group_decide(g.is_follower() ? ops_[g.leader] : op);
}

// A follower's end: committed, or not (its block unused, and unless that
// was harmless, the group's failure).
void ClientCore::end_follower(Op& f, KvStatus status, uint32_t detail, bool committed) {
  Op& leader = ops_[f.group.leader];
  GroupState& g = leader.group;
  // A DELETE of a key the backup lacks has nothing to change there; an UNLOCK's answer is its primary's.
  const bool harmless = committed || f.group.abandoned || f.type == KvOp::UNLOCK || (f.type == KvOp::DELETE && status == KvStatus::NOT_FOUND);
  if (!harmless && g.failure == KvStatus::OK) {
    g.failure = status;
    g.failure_detail = detail;
  }
  if (f.block.held && !((committed || f.group.created) && f.block.published)) g.unused |= static_cast<uint8_t>(1u << f.group.backup);
  g.any_committed |= committed;
  g.followers[f.group.backup] = GroupState::kNone;
  if (f.linked && f.type == KvOp::DELETE) cache_forget(f);
  if (!f.shares_item) free_item(f);  // an INCR's own (a PUT's or CAS's is the leader's)
  release_op(f);  // no answer of its own
  if (g.ending) {
    if (!g.abandoning && !has_followers(leader)) complete(leader, g.end_status, g.end_detail);
    return;
  }
  group_decide(leader);
}

bool ClientCore::has_followers(const Op& leader) const {
  for (uint8_t index : leader.group.followers) {
    if (index != GroupState::kNone) return true;
  }
  return false;
}

// Once every member stopped, what the group does next.
void ClientCore::group_decide(Op& leader) {
  GroupState& g = leader.group;
  if (g.ending || g.vote == Vote::RUNNING) return;
  uint32_t held = g.vote == Vote::HELD;
  bool retry = g.vote == Vote::RETRY;
  for (uint8_t index : g.followers) {
    if (index == GroupState::kNone) continue;
    const GroupState& fg = ops_[index].group;
    if (fg.vote == Vote::RUNNING) return;  // still working (or committing)
    held += fg.vote == Vote::HELD;
    retry |= fg.vote == Vote::RETRY;
    if (ops_[index].epoch_wait) leader.epoch_wait = true;  // a backup's epoch word is closed: TIMEOUT at the deadline
  }
  // Every member that holds locks gives them back (and stops again, RETRY or
  // DONE); one stopped before its atomic holds none and takes that vote now.
  const auto release_held = [&](KvStatus status, uint32_t detail) {
    for (uint8_t index : g.followers) {
      if (index == GroupState::kNone || ops_[index].group.vote != Vote::HELD) continue;
      Op& f = ops_[index];
      if (f.group.taken) {
        lock_undo(f);  // stops again with RETRY
        continue;
      }
      if (f.group.at_atomic) {
        f.group.vote = Vote::RETRY;
        continue;
      }
      f.group.vote = Vote::RUNNING;
      f.write().final_status = KvStatus::OK;  // a DELETE's NOT_FOUND of an expired item must not end it here
      release_and_retry(f);  // stops again with RETRY
    }
    if (g.vote == Vote::HELD && g.at_atomic) {
      g.vote = status == KvStatus::OK ? Vote::RETRY : Vote::DONE;
      g.status = status;
      g.detail = detail;
    } else if (g.vote == Vote::HELD) {
      g.vote = Vote::RUNNING;
      if (status == KvStatus::OK) {
        leader.write().final_status = KvStatus::OK;  // it retries: what it decided goes
        release_and_retry(leader);
      } else {
        release_and_finish(leader, status, detail);  // stops again with DONE
      }
    }
    group_decide(leader);  // everyone may have stopped again already
  };
  if (g.committing) {
    // Every follower has ended (committed, or failed mid-commit: its backup may
    // hold the write, so the op may have taken effect) or, an INCR's, stopped to
    // retry: its add met a DELETE's seal.
    g.committing = false;
    if (g.failure != KvStatus::OK) return release_held(g.failure, g.failure_detail);
    if (retry) return release_held(g.any_committed ? KvStatus::TIMEOUT : KvStatus::OK, 0);  // the group starts over only if nothing was added
    g.followers_committed = true;
    return group_go(leader);
  }
  if (g.vote == Vote::DONE || g.failure != KvStatus::OK) {
    // The primary answered (the primary decides), or a backup cannot take the write.
    const KvStatus status = g.vote == Vote::DONE ? g.status : g.failure;
    const uint32_t detail = g.vote == Vote::DONE ? g.detail : g.failure_detail;
    if (g.vote == Vote::HELD) return release_held(status, detail);
    return group_end(leader, status, detail);  // followers give their locks back, then the leader answers
  }
  if (retry) {
    if (held > 0) return release_held(KvStatus::OK, 0);
    return backoff(leader, Phase::W_READ);  // resume: group_restart; past the deadline, finish
  }
  // All held. An INCR whose primary found the counter while a backup must create
  // it: a DELETE has passed that backup and not yet the primary (or its writer
  // died in between). Adding on the primary and creating on the backup would
  // leave the backup holding the counter after the DELETE: wait until they agree.
  // A LOCK's backup may create the lock above the primary's token instead (the word it
  // creates is not a count: a backup's token is only ever required to be the larger).
  const uint32_t primary_token = leader.is_atomic() ? static_cast<uint32_t>(leader.atomic().expect >> kLockVersionShift) : 0;
  if (leader.is_atomic() && g.at_atomic) {
    for (uint8_t index : g.followers) {
      if (index == GroupState::kNone || ops_[index].group.at_atomic) continue;
      if (leader.type == KvOp::LOCK && ops_[index].atomic().create_token > primary_token) continue;
      if (leader.type == KvOp::LOCK) g.lock_floor = std::max(g.lock_floor, primary_token);  // its next creation's
      return release_held(KvStatus::OK, 0);
    }
  }
  if (leader.type == KvOp::LOCK && g.at_atomic) g.lock_floor = std::max(g.lock_floor, primary_token);
  // UNLOCK: the primary first; the backups once it has answered (abandon()). An acquirer
  // meanwhile meets a backup still held and backs off.
  if (leader.type == KvOp::UNLOCK) return group_go(leader);
  // The backups commit first.
  if (!has_followers(leader)) return group_go(leader);
  g.committing = true;
  for (uint8_t index : g.followers) {
    if (index != GroupState::kNone) group_go(ops_[index]);
  }
}

// The group said go: the member's commit, or its atomic.
void ClientCore::group_go(Op& op) {
  op.group.vote = Vote::RUNNING;
  op.group.go = true;
  if (op.group.at_atomic) return atomic_step(op);
  write_commit(op);
}

// The group's retry, after the leader's backoff: every member from its start.
void ClientCore::group_restart(Op& leader) {
  leader.group.vote = Vote::RUNNING;  // first: a follower that stops at once must find the leader running
  for (uint8_t index : leader.group.followers) {
    if (index != GroupState::kNone) restart_member(ops_[index]);
  }
  restart_member(leader);
}

// A LOCK's backup gives back the lock word it took, as it found it (atomics.cc); it then
// stops with RETRY, or ends if its leader is ending.
void ClientCore::lock_undo(Op& f) {
  f.group.vote = Vote::RUNNING;
  f.group.undoing = true;
  atomic_step(f);
}

void ClientCore::restart_member(Op& op) {
  op.group.vote = Vote::RUNNING;
  op.group.go = false;
  op.group.at_atomic = false;
  op.group.any_committed = op.group.followers_committed = false;
  if (op.is_atomic()) {
    cache_forget(op);  // the group starts over because the replicas moved: look again
    op.start_lookup();
    return get_read_buckets(op, Phase::G_BUCKETS);
  }
  op.write().moving = false;
  write_read_buckets(op);
}

// finish() of a grouped op. A follower ends; a leader answers at once if it
// has no followers left, else once they have given their locks back.
void ClientCore::group_end(Op& op, KvStatus status, uint32_t detail) {
  if (op.group.is_follower()) {
    const bool committed = (op.phase == Phase::W_COMMIT && (status == KvStatus::OK || status == KvStatus::NOT_FOUND)) ||
                           (op.phase == Phase::A_ATOMIC && status == KvStatus::OK);
    return end_follower(op, status, detail, committed);
  }
  GroupState& g = op.group;
  if (g.ending) return;  // answering already (a lost connection failing it again)
  if (!has_followers(op)) return complete(op, status, detail);
  g.ending = true;
  g.end_status = status;
  g.end_detail = detail;
  // What the leader keeps of its connection is settled now: that connection may be
  // closed (its index even reused) before the last follower ends and the leader answers.
  if (op.linked) {
    if (op.ring_credit) link(op).ring.reserved--;
    op.ring_credit = false;
    if (op.type == KvOp::DELETE || status == KvStatus::TYPE_MISMATCH) cache_forget(op);
    location_after(op, status);
    op.linked = false;
  }
  if (op.phase == Phase::BACKOFF) backoffs_--;
  op.begin(Phase::W_PARKED);
  g.abandoning = true;  // followers ending synchronously below must not answer for the leader
  for (uint8_t index : g.followers) {
    if (index != GroupState::kNone) abandon(ops_[index]);
  }
  g.abandoning = false;
  if (!has_followers(op)) complete(op, status, detail);
}

// The leader is ending: a follower gives back its locks (if it holds any and
// can) and ends; one in the middle of a round ends at its next stop.
void ClientCore::abandon(Op& f) {
  f.group.abandoned = true;
  const bool stopped = f.phase == Phase::W_PARKED && f.group.vote != Vote::RUNNING;
  if (stopped && f.type == KvOp::UNLOCK && f.group.at_atomic && !link(f).broken && ops_[f.group.leader].group.release_backups) {
    return group_go(f);  // its primary answered: release this client's word here too (ends at its answer)
  }
  if (stopped && f.group.taken && !link(f).broken) {
    // A LOCK's backup keeps the lock its primary granted; if the primary did not, it gives it back.
    if (ops_[f.group.leader].group.end_status == KvStatus::OK) return end_follower(f, KvStatus::OK, 0, true);
    return lock_undo(f);  // ends at its completion
  }
  // Holding no locks: stopped to retry, or before its atomic.
  const bool lockless = stopped && (f.group.vote == Vote::RETRY || f.group.at_atomic);
  if (f.phase == Phase::IDLE || link(f).broken || lockless) {
    return end_follower(f, KvStatus::DISCONNECTED, 0, false);
  }
  if (stopped && f.group.vote == Vote::HELD) {
    f.group.vote = Vote::RUNNING;
    release_and_finish(f, KvStatus::DISCONNECTED);
  }
}

}  // namespace rkv::kv
