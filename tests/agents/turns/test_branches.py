"""The conversation tree: paths, leaves and versions, from rows alone."""

from __future__ import annotations

from agents.turns.branches import TurnNode, TurnTree, Versions


def tree() -> TurnTree:
    # 1 "hi" -> 2 "more" ; 3 regenerates 2's message ; 4 edits "more" ; 5 continues 3 ; 6 a new
    # first message (an edit of "hi")
    return TurnTree([
        TurnNode(1, 10, None),
        TurnNode(2, 20, 1),
        TurnNode(3, 20, 1),
        TurnNode(4, 40, 1),
        TurnNode(5, 50, 3),
        TurnNode(6, 60, None),
    ])


def test_paths_follow_the_parents_from_the_start():
    t = tree()
    assert t.path(5) == [1, 3, 5]
    assert t.path(2) == [1, 2]
    assert t.path(None) == [] and t.path(99) == []


def test_the_newest_turn_below_a_node_is_where_its_branch_ends():
    t = tree()
    assert t.latest() == 6
    assert t.latest_leaf(1) == 5
    assert t.latest_leaf(2) == 2 and t.latest_leaf(3) == 5


def test_regenerated_answers_are_versions_of_one_message():
    t = tree()
    assert t.answer_versions(2) == Versions(1, 2, None, 3)
    assert t.answer_versions(3) == Versions(2, 2, 2, None)
    assert t.answer_versions(4) == Versions(1, 1, None, None)


def test_edited_messages_are_versions_at_one_point_shown_by_their_newest_answer():
    t = tree()
    # at the point after turn 1: message 20 (newest answer 3) and message 40 (turn 4)
    assert t.message_versions(2) == Versions(1, 2, None, 4)
    assert t.message_versions(3) == Versions(1, 2, None, 4)
    assert t.message_versions(4) == Versions(2, 2, 3, None)
    assert t.message_versions(1) == Versions(1, 2, None, 6)


def test_bad_parent_links_never_loop():
    t = TurnTree([TurnNode(1, 1, 2), TurnNode(2, 2, 1)])
    assert t.path(2) == [1, 2] and t.path(1) == [1]
    assert t.latest_leaf(1) == 2
