"""Parsing observation text back into nodes (used by scripted agents)."""

from __future__ import annotations

from rlvr_gym_web.observation import bid_of, find, parse_tree

OBS = """Goal: do it
URL: file:///x.html
Page:
[2] navigation
  [5] button 'Compose'
[11] heading 'Inbox'
[12] table
  [20] row
    [21] cell 'ann@example.com'
    [22] textbox 'New name for it\\'s.txt' value='a b' focused
    [23] checkbox 'Done: x' checked
  [30] row
    [31] cell 'bob'
"""


def test_parse_tree_reads_ids_roles_names_values_and_nesting() -> None:
    nodes = parse_tree(OBS)
    assert [n.bid for n in nodes] == ["2", "5", "11", "12", "20", "21", "22", "23", "30", "31"]
    box = nodes[6]
    assert (box.role, box.name, box.value, box.props, box.depth) == ("textbox", "New name for it's.txt", "a b",
                                                                    ("focused",), 2)
    assert nodes[7].props == ("checked",) and nodes[7].value is None
    assert nodes[nodes[9].parent].bid == "30" and nodes[1].parent == 0 and nodes[2].parent is None


def test_find_within_a_row_and_bid_of() -> None:
    nodes = parse_tree(OBS)
    second_row = find(nodes, "row")[1]
    assert [nodes[i].name for i in find(nodes, "cell", within=second_row)] == ["bob"]
    assert bid_of(nodes, "button", "Compose") == "5"
    assert find(nodes, contains="ann@") == [5]
