"""Parsing observation text back into nodes (used by scripted agents)."""

from __future__ import annotations

from rlvr_gym_web.observation import bid_of, find, named, parse_tree, target_of

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


def test_named_keeps_actionable_elements_and_target_of_falls_back_to_the_id() -> None:
    nodes = parse_tree("""Page:
[1] heading 'Edit Lamp'
[2] button 'Edit Lamp'
[3] dialog 'Edit Lamp'
  [4] button 'OK'
  [5] button 'OK'
  [6] combobox 'Mode' value='auto'
    [7] option 'auto' selected
  [8] text 'Mode'""")
    assert named(nodes, "Edit Lamp") == [1]  # the heading and the dialog are not acted on
    assert named(nodes, "OK") == [3, 4] and named(nodes, "ok") == [] and named(nodes, "Mode") == [5]
    assert target_of(nodes, 1, by_name=True) == "Edit Lamp" and target_of(nodes, 1, by_name=False) == "2"
    assert target_of(nodes, 3, by_name=True) == "4"  # two buttons named OK: the id
    assert target_of(nodes, 5, by_name=True) == "Mode"
    digits = parse_tree("Page:\n[15] link '3'\n[3] link '15'\n[w] button '7'\n[9] button 'w'")
    # an env reads a target as an id first: a name that is digits, or another element's id, is not written
    assert [target_of(digits, i, by_name=True) for i in range(4)] == ["15", "3", "w", "9"]
